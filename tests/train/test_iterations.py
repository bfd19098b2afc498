"""`trainer.num_iterations` and `trainer.kl_estimator`: the command a user types, and runs in-process as it runs.

- num_iterations=2: one metrics.jsonl row per step (one rollout and its two updates), in order, rewards on each;
  checkpoints are numbered by optimizer updates (resume after SIGTERM: tests/train/test_training_e2e.py);
- GSPO and GRPO: at num_iterations=1 every importance ratio is 1, so the sequence- and token-level objectives
  have the same gradient and the runs are the same; at 2 the second update's ratios differ from 1 and so do the runs;
- the default GRPO's k3 KL is never negative (Tunix's `kl` estimator, log pi - log pi_ref, was in 6 of 40 steps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_rlexp
from tests.train.module_runs import process_state_kept
from tests.train.test_training_e2e import run

pytestmark = pytest.mark.slow  # real runs of the tiny default

QUICK = ["trainer.eval_prompts=16", "trainer.eval_samples=2", "logger=none"]


TWO = ["trainer.max_steps=6", "trainer.eval_every=3", "trainer.checkpoint_every=3", *QUICK]  # 2 iterations a step
K3 = ["trainer.max_steps=40", "trainer.eval_every=40", "trainer.checkpoint_every=40", *QUICK]  # the default GRPO


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def two_iterations(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The user's command at trainer.num_iterations=2 (GRPO): (run dir, its stderr)."""
    run_dir = tmp_path_factory.mktemp("iterations") / "run"
    proc = run_rlexp("trainer.num_iterations=2", *TWO, f"hydra.run.dir={run_dir}", check=True)
    return run_dir, proc.stderr


@pytest.fixture(scope="module")
def grpo_k3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 steps of the default GRPO (k3 KL), in-process as `python -m rlexp` runs them."""
    run_dir = tmp_path_factory.mktemp("k3") / "run"
    with process_state_kept():
        run(run_dir, K3)
    return run_dir


def test_two_iterations_write_one_row_per_step_in_order(two_iterations: tuple[Path, str]) -> None:
    run_dir, stderr = two_iterations
    rows = _rows(run_dir)
    assert [r["step"] for r in rows] == list(range(7))
    for r in rows[1:]:
        assert {"rewards/sum", "loss", "kl", "grad_norm", "completions/mean_length"} <= r.keys(), r["step"]
    assert [r["step"] for r in rows if "eval/pass_at_1" in r] == [0, 3, 6]
    # the console shows the newest published reward: none yet at step 1 (as at num_iterations=1), then every step
    assert stderr.count("reward n/a") == 1 and stderr.count("rlexp: step ") == 6
    assert sorted(int(p.name) for p in (run_dir / "checkpoints" / "actor").iterdir()) == [6, 12]  # updates
    assert json.loads((run_dir / "summary.json").read_text())["train"]["steps"] == 6


def _updates(run_dir: Path) -> list[dict]:
    return [{k: r[k] for k in ("loss", "grad_norm", "rewards/sum")} for r in _rows(run_dir)[1:]]


def test_gspo_equals_grpo_at_one_iteration_and_differs_at_two(
    grpo_k3: Path, two_iterations: tuple[Path, str], tmp_path: Path
) -> None:
    """docs/algorithms.md: at num_iterations=1 every ratio is 1 (old log-probs = current ones). GSPO runs in-process
    as `python -m rlexp` runs it, with the GRPO runs' configs (the command itself: the tests here)."""
    run(tmp_path / "gspo1", ["trainer=gspo", *K3])
    grpo, gspo = _updates(grpo_k3), _updates(tmp_path / "gspo1")
    assert len(grpo) == len(gspo) == 40
    for a, b in zip(grpo, gspo, strict=True):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-9)
    run(tmp_path / "gspo2", ["trainer=gspo", "trainer.num_iterations=2", *TWO])
    grpo, gspo = _updates(two_iterations[0]), _updates(tmp_path / "gspo2")
    assert grpo[0]["rewards/sum"] == gspo[0]["rewards/sum"]  # the same first rollout
    assert grpo[0]["grad_norm"] != pytest.approx(gspo[0]["grad_norm"], rel=1e-4)  # its second update differs


def test_default_k3_kl_is_never_negative(grpo_k3: Path) -> None:
    kls = [r["kl"] for r in _rows(grpo_k3) if "kl" in r]
    assert len(kls) == 40 and min(kls) >= 0.0 and max(kls) > 0.0, kls
