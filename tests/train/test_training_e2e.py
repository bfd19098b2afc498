"""Real Tunix GRPO runs of the tiny default, in-process (JAX compilations are shared between tests).

Covers: run-dir files and names, a run whose reward rises, SIGTERM -> checkpoint -> resume with
metrics identical to an uninterrupted run, resume=never refusing a used run dir.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from rlexp.errors import ConfigError, RlexpError
from rlexp.rewards.registry import register
from rlexp.train.run import train
from tests.helpers import SHORT, compose_cfg, in_eval
from tests.resume import SIGTERM_REWARD, assert_same_steps, sigterm_then_resume, train_steps, untimed
from tests.train.module_runs import process_state_kept

pytestmark = pytest.mark.slow


def run(run_dir: Path, overrides: list[str]) -> float:
    cfg = compose_cfg(overrides)
    from rlexp.config.load import to_config
    from rlexp.train.plan import DONE, make_plan

    conf = to_config(cfg)
    plan = make_plan(conf, cfg, str(run_dir), lambda: None)  # as `python -m rlexp` plans it (rlexp.main)
    return float(plan.objective or 0.0) if plan.action == DONE else train(plan, conf, cfg)


def records(run_dir: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


SLOW = 2.0  # seconds added to every checkpoint save and eval of the SHORT run


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """SHORT (8 steps, evals at 0, 4 and 8, checkpoints at 4 and 8) with every checkpoint save and eval made SLOW
    seconds longer: (run dir, objective). Read by the tests below; those that run in a run dir again copy it."""
    from tunix.sft import checkpoint_manager

    import rlexp.train.evaluate

    save, evaluate = checkpoint_manager.CheckpointManager.save, rlexp.train.evaluate.evaluate

    def slow_save(self, *args, **kwargs):
        saved = save(self, *args, **kwargs)
        if saved:
            time.sleep(SLOW)
        return saved

    def slow_evaluate(*args, **kwargs):
        time.sleep(SLOW)
        return evaluate(*args, **kwargs)

    run_dir = tmp_path_factory.mktemp("short") / "run"
    with process_state_kept(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint_manager.CheckpointManager, "save", slow_save)
        patch.setattr(rlexp.train.evaluate, "evaluate", slow_evaluate)
        objective = run(run_dir, SHORT)
    return run_dir, objective


def test_short_run_writes_run_dir_contract(short_run: tuple[Path, float]) -> None:
    tmp_path, objective = short_run
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 8
    for key in ("pass_at_1", "greedy_accuracy"):
        assert 0.0 <= summary["eval"]["before"][key] <= 1.0 and 0.0 <= summary["eval"]["after"][key] <= 1.0
    assert objective == summary["eval"]["after"]["pass_at_1"] == summary["objective"]["value"]
    assert summary["train"]["wall_seconds"] > 0 and summary["versions"]["google-tunix"] == "0.1.7"
    assert "git_commit" in summary["versions"]

    steps = train_steps(tmp_path)
    assert sorted(steps) == list(range(1, 9))
    for step in range(1, 9):
        r = steps[step]
        for name in (
            "rewards/sum",
            "rewards/mean",
            "rewards/std",
            "frac_reward_zero_std",
            "completions/mean_length",
            "rewards/arith_correct/mean",
            "rewards/arith_format/mean",
            "perf/step_time_sec",
            "perf/rollout_time_sec",
        ):
            assert name in r, f"step {step} lacks {name}"
        assert 0 < r["perf/rollout_time_sec"] < r["perf/step_time_sec"]  # a step is its rollout, then its update
        # sum of weighted per-function means = total reward (Tunix sums the weighted functions)
        assert r["rewards/sum"] == pytest.approx(r["rewards/arith_correct/mean"] + 0.1 * r["rewards/arith_format/mean"])
    for step in range(2, 9):  # actor metrics of every optimizer update
        assert {"loss", "kl", "grad_norm"} <= set(steps[step]), step
    evals = [r for r in records(tmp_path) if "eval/pass_at_1" in r]
    assert [r["step"] for r in evals] == [0, 4, 8]
    samples = records(tmp_path, "samples.jsonl")
    assert samples and {"step", "id", "prompt", "completion", "answer", "rewards"} <= set(samples[0])
    assert set(samples[0]["rewards"]) == {"arith_correct", "arith_format"}
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "actor").iterdir()) == ["4", "8"]


def test_saves_and_mid_run_evals_are_timed_apart_from_the_steps(short_run: tuple[Path, float]) -> None:
    """Every checkpoint save and eval made SLOW seconds longer: no step takes them, and they are reported on the
    steps that saved (perf/checkpoint_time_sec) and were evaluated (perf/eval_time_sec)."""
    tmp_path, slow = short_run[0], SLOW
    rows = {r["step"]: r for r in records(tmp_path)}
    assert [s for s in rows if "perf/checkpoint_time_sec" in rows[s]] == [4, 8]
    assert [s for s in rows if "perf/eval_time_sec" in rows[s]] == [0, 4, 8]
    assert all(rows[s]["perf/checkpoint_time_sec"] > slow for s in (4, 8))
    assert all(rows[s]["perf/eval_time_sec"] > slow for s in (0, 4, 8))
    step_times = {s: rows[s]["perf/step_time_sec"] for s in range(2, 9)}  # step 1 may compile
    assert max(step_times.values()) < slow, step_times


def test_reward_rises(tmp_path: Path) -> None:
    # SHORT's evals (16 prompts, 2 samples each): programs the suite compiles anyway
    run(tmp_path, [*SHORT, "trainer.max_steps=80", "trainer.eval_every=80", "trainer.checkpoint_every=80"])
    rewards = [train_steps(tmp_path)[s]["rewards/sum"] for s in range(1, 81)]
    first, last = np.mean(rewards[:25]), np.mean(rewards[-25:])
    assert last > first + 0.05, (first, last)


@pytest.mark.parametrize("iterations", [1, 2])
def test_sigterm_checkpoints_and_resume_equals_uninterrupted(iterations: int, tmp_path: Path) -> None:
    """Also with num_iterations=2: a step is a rollout and its two updates; checkpoints count updates."""
    overrides = [
        *SHORT,
        f"trainer.num_iterations={iterations}",
        "trainer.max_steps=12",
        "trainer.eval_every=2",
        "trainer.checkpoint_every=6",
        "reward.functions=[{fn: arith_correct}, {fn: arith_format, weight: 0.1}, " + SIGTERM_REWARD + "]",
    ]

    def forced_checkpoint(interrupted: Path) -> None:
        summary = json.loads((interrupted / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["train"]["steps"] == 4
        saved = [p.name for p in (interrupted / "checkpoints" / "actor").iterdir()]
        assert str(4 * iterations) in saved  # off-schedule: SIGTERM forced it

    # SIGTERM during the rollout of step 5; the same run dir again: resume=auto continues at step 5
    full, interrupted = sigterm_then_resume(lambda d: run(d, overrides), tmp_path, 5, 4, forced_checkpoint)
    assert_same_steps(
        full, interrupted, range(1, 13), ("rewards/sum", "loss", "kl", "grad_norm", "completions/mean_length")
    )
    after = json.loads((interrupted / "summary.json").read_text())
    assert after["status"] == "completed"
    reference = json.loads((full / "summary.json").read_text())["eval"]["after"]
    assert untimed(after["eval"]["after"]) == pytest.approx(untimed(reference))


def test_a_run_stopped_after_its_last_row_before_its_summary_resumes_to_one_row_a_step(
    short_run: tuple[Path, float], tmp_path: Path
) -> None:
    """Killed between the last step's metrics row and summary.json (found by the random kills): the resume reruns
    the final eval into that row, not into a second row of the same step."""
    shutil.copytree(short_run[0], tmp_path, dirs_exist_ok=True)  # the SHORT run's dir, a copy of this test's own
    reference = (tmp_path / "metrics.jsonl").read_text()
    (tmp_path / "summary.json").unlink()  # as a SIGKILL right before it leaves the run dir
    run(tmp_path, SHORT)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(9))
    before = [json.loads(line) for line in reference.splitlines()]
    wall = ("time", "_sec", "latency", "perf/", "seconds")
    same = lambda r: {k: v for k, v in r.items() if not any(t in k for t in wall)}  # noqa: E731
    assert [same(r) for r in rows] == [same(r) for r in before]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"


def test_resume_never_refuses_a_used_run_dir(short_run: tuple[Path, float], tmp_path: Path) -> None:
    shutil.copytree(short_run[0], tmp_path, dirs_exist_ok=True)  # the SHORT run's dir, a copy of this test's own
    before = (tmp_path / "summary.json").read_text()
    with pytest.raises(ConfigError, match="trainer.resume='never'.*already holds checkpoints"):
        run(tmp_path, [*SHORT, "trainer.resume=never"])
    assert (tmp_path / "summary.json").read_text() == before  # nothing overwritten


def test_resume_with_another_config_is_refused(short_run: tuple[Path, float], tmp_path: Path) -> None:
    shutil.copytree(short_run[0], tmp_path, dirs_exist_ok=True)
    with pytest.raises(
        ConfigError, match=r"trainer.learning_rate=0.002: .* was trained with trainer.learning_rate=0.001"
    ):
        run(tmp_path, [*SHORT, "trainer.learning_rate=2e-3"])
    run(tmp_path, [*SHORT, "logger=none", "compile_cache.enabled=false"])  # tracking/caching may change


@pytest.fixture(scope="module")
def lora_micro_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 steps of LoRA adapters (rank 4) trained over micro-batches of 2 prompts: one run for the two tests below."""
    run_dir = tmp_path_factory.mktemp("lora_micro") / "run"
    micro = ["trainer.micro_batch_size=2", "trainer.rollout_micro_batch_size=4"]
    with process_state_kept():
        run(run_dir, [*SHORT, "trainer.max_steps=4", *micro, "trainer.lora.rank=4", "trainer.learning_rate=3e-3"])
    return run_dir


def test_micro_batches_accumulate_into_one_update_per_step(lora_micro_run: Path) -> None:
    tmp_path = lora_micro_run
    steps = train_steps(tmp_path)
    assert sorted(steps) == [1, 2, 3, 4]  # 4 optimizer updates, each over 4 micro-batches of 2 prompts
    assert all("loss" in steps[s] for s in (2, 3, 4))
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "actor").iterdir()) == ["4"]


def test_lora_trains_only_adapters(lora_micro_run: Path) -> None:
    tmp_path = lora_micro_run
    steps = train_steps(tmp_path)
    assert sorted(steps) == [1, 2, 3, 4] and all(steps[s]["grad_norm"] > 0 for s in (2, 3, 4))
    saved = tmp_path / "checkpoints" / "actor" / "4" / "model_params"
    import orbax.checkpoint as ocp

    tree = ocp.PyTreeCheckpointer().metadata(saved).item_metadata.tree
    names = {"/".join(map(str, k)) for k in _flat_keys(tree)}
    assert names and all("lora" in n for n in names), sorted(names)[:5]  # Tunix saves only the adapters


def _flat_keys(tree, prefix=()):  # noqa: ANN001, ANN202
    items = tree.items() if hasattr(tree, "items") else []
    out = []
    for k, v in items:
        out += _flat_keys(v, (*prefix, k)) if hasattr(v, "items") else [(*prefix, k)]
    return out


def test_reward_error_budget_stops_with_a_checkpoint(tmp_path: Path) -> None:
    calls = {"n": 0}

    @register("test_fail_from_step_3")
    def _():
        def test_fail_from_step_3(prompts, completions, **_):
            if in_eval():
                return [0.0] * len(completions)
            calls["n"] += 1
            if calls["n"] >= 3:
                raise RuntimeError("reward service down")
            return [0.0] * len(completions)

        return test_fail_from_step_3

    overrides = [
        *SHORT,
        "trainer.max_steps=8",
        "reward.max_error_ratio=0.4",
        "reward.functions=[{fn: arith_correct}, {fn: test_fail_from_step_3, weight: 0.0}]",
    ]
    with pytest.raises(RlexpError, match="reward.max_error_ratio=0.4: 50% of the step's reward calls"):
        run(tmp_path, overrides)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["train"]["steps"] == 2  # step 3's rollout broke the budget
    assert "2" in [p.name for p in (tmp_path / "checkpoints" / "actor").iterdir()]
    errors = [
        r["rewards/test_fail_from_step_3/errors"]
        for r in records(tmp_path)
        if "rewards/test_fail_from_step_3/errors" in r
    ]
    assert errors[:2] == [0.0, 0.0]
