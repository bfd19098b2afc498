"""Sweeps over env.tasks' weights, checked as such: each job's env is resolved and preflighted with its own rows and
scorer (GKE dry run), every job evaluates on the same rows, a sweep every job of which has a bad weight is refused
once, and a real sweep records each job's weights and per-task metrics (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp import envs
from rlexp.config.load import compose, to_config
from tests.sweep.helpers import read, rlexp


def test_eval_rows_are_the_same_whatever_the_weights_and_train_rows_follow_them() -> None:
    def splits(weight: int):  # noqa: ANN202
        return envs.load_rows(
            envs.resolve(to_config(compose(["experiment=rg_demo", f"env.tasks.chain_sum.weight={weight}"])))
        )

    one, three = splits(1), splits(3)
    assert [r["id"] for r in one.eval] == [r["id"] for r in three.eval]
    assert sum(r["task"] == "chain_sum" for r in one.eval) == 32 == len(one.eval) / 3
    assert [sum(r["task"] == "chain_sum" for r in s.train) for s in (one, three)] == [1024, 1843]


def test_a_dry_run_sweep_checks_each_job_with_its_own_env(tmp_path: Path) -> None:
    """Each job's preflight (validation.json) is its own, scored by the env's scorer, not the reward group's."""
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        '{"id": "chain_sum-train-0", "completion": "<answer>1</answer>"}\n'
        '{"id": "products-train-0", "completion": "<answer>0</answer>"}\n'
    )
    sweep = tmp_path / "sweep"
    proc = rlexp(
        "-m",
        "experiment=rg_demo",
        "slice=v6e-8",
        "hydra/launcher=gke",
        "hydra.launcher.dry_run=true",
        "+sweep=rg_task_weights",  # chain_sum's weight 1, 2, 4
        f"validate.completions={completions}",
        f"hydra.sweep.dir={sweep}",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read(sweep / "sweep.json")["swept_keys"] == ["env.tasks.chain_sum.weight"]
    for job, weight in ((0, 1), (1, 2), (2, 4)):
        validation = read(sweep / str(job) / "validation.json")
        checks = {c["name"]: c["status"] for c in validation["checks"]}
        assert checks["reward:reasoning_gym"] == "ok" and "reward:arith_correct" not in checks, checks
        assert {"env:chain_sum", "env:products", "env:letter_counting"} <= set(checks)
        assert validation["memory"]["lengths"]["source"].startswith("env=reasoning_gym")
        assert f"- env.tasks.chain_sum.weight={weight}" in (sweep / str(job) / "jobset.yaml").read_text()
    assert "prompts 88 + completions 8 tokens (env=reasoning_gym" in proc.stdout + proc.stderr


def test_a_sweep_every_job_of_which_has_a_bad_weight_is_refused_once(tmp_path: Path) -> None:
    proc = rlexp("-m", "experiment=rg_demo", "env.tasks.chain_sum.weight=0,-1", f"hydra.sweep.dir={tmp_path}")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("rlexp: error")]
    assert proc.returncode == 2 and lines == [
        "rlexp: error: env.tasks.chain_sum.weight=0: must be a number > 0 (every one of the sweep's 2 jobs is "
        "refused; none ran)"
    ], proc.stderr[-2000:]


@pytest.mark.slow
def test_a_real_sweep_records_each_jobs_weights_and_per_task_metrics(tmp_path: Path) -> None:
    proc = rlexp(
        "-m",
        "experiment=rg_demo",
        "env.tasks.chain_sum.weight=1,3",
        "trainer.max_steps=1",
        "trainer.eval_every=1",
        "trainer.checkpoint_every=1",
        "trainer.eval_prompts=12",
        "trainer.eval_samples=2",
        "logger=none",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    tasks = ("chain_sum", "products", "letter_counting")
    for job, weight, rows in ((0, 1.0, 1024), (1, 3.0, 1843)):
        summary = read(tmp_path / str(job) / "summary.json")
        assert summary["status"] == "completed"
        assert summary["data"]["tasks"]["chain_sum"] == {"weight": weight, "train_rows": rows, "eval_rows": 4}
        assert summary["data"]["tasks"]["products"]["weight"] == 1.0
        assert all(f"{t}/pass_at_1" in summary["eval"]["after"] for t in tasks)
        assert summary["plan"]["memory"]["lengths"]["prompt"] == 88
        metrics = [json.loads(line) for line in (tmp_path / str(job) / "metrics.jsonl").read_text().splitlines()]
        assert all(f"env/{t}/reward_mean" in metrics[-1] or f"env/{t}/errors" in metrics[-1] for t in tasks)
    html = (tmp_path / "report.html").read_text()
    assert all(f'data-task="{t}"' in html for t in tasks) and "env.tasks.chain_sum.weight" in html
