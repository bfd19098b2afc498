"""SIGKILL around a checkpoint save: nothing is lost, nothing is written twice.

- killed right after the step-4 checkpoint committed, before rows 3 and 4 reached metrics.jsonl and before
  the eval due at step 4: the rerun puts the rows back from the checkpoint and runs that eval
  (rlexp.train.checkpoint_rows);
- killed in the middle of the step-8 save: the previous checkpoint stays restorable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, SHORT, run_rlexp

pytestmark = pytest.mark.slow

# Runs `python -m rlexp` with orbax's save wrapped: once the save of step KILL_STEP has started (KILL_WHEN=started:
# its files are being written by orbax's background thread) or committed (KILL_WHEN=committed), SIGKILL.
DRIVER = """
import os, runpy, signal, sys
import tunix.sft.checkpoint_manager as cm
original = cm.CheckpointManager.save
step_to_kill, when = int(os.environ["KILL_STEP"]), os.environ["KILL_WHEN"]
def save(self, step, *args, **kwargs):
    started = original(self, step, *args, **kwargs)
    if started and step == step_to_kill:
        if when == "committed":
            self._checkpoint_manager.wait_until_finished()
        os.kill(os.getpid(), signal.SIGKILL)
    return started
cm.CheckpointManager.save = save
sys.argv = ["rlexp", *sys.argv[1:]]
runpy.run_module("rlexp", run_name="__main__", alter_sys=True)
"""


def killed_run(args: list[str], step: int, when: str) -> None:
    env = {**__import__("os").environ, "KILL_STEP": str(step), "KILL_WHEN": when}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, cwd=REPO, timeout=600, env=env
    )
    assert proc.returncode == -9, proc.stderr[-2000:]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints" / "actor").iterdir() if p.name.isdigit())


def test_kills_around_checkpoint_saves_lose_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [*SHORT, "trainer.max_steps=12", f"hydra.run.dir={run_dir}"]  # checkpoints and evals every 4 steps

    killed_run(args, 4, "committed")
    assert checkpoints(run_dir) == ["4"]
    assert [r["step"] for r in rows(run_dir)] == [0, 1, 2]  # rows 3 and 4 are written after the save
    assert list(json.loads((run_dir / "evals.json").read_text())) == ["before"]

    killed_run(args, 8, "started")  # resumes from 4, then dies while saving 8
    assert not (run_dir / "summary.json").exists()
    finished = checkpoints(run_dir)
    assert "4" in finished

    resumed = run_rlexp(*args)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    restored = 8 if "8" in finished else 4  # orbax publishes a step only once it is complete
    assert f"resuming {run_dir} from step {restored}" in resumed.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 12
    # one record per step (step 0 = the eval before training): nothing lost, nothing written twice
    by_step = {r["step"]: r for r in rows(run_dir)}
    assert [r["step"] for r in rows(run_dir)] == list(range(0, 13))
    for step in (3, 4):  # put back from checkpoint 4: the rollout's, the update's and the step's time
        assert {"rewards/sum", "loss", "kl", "grad_norm", "perf/step_time_sec"} <= set(by_step[step]), by_step[step]
    assert "eval/pass_at_1" in by_step[4]  # the eval due at step 4, run by the rerun from checkpoint 4
    evals = json.loads((run_dir / "evals.json").read_text())
    assert [e["step"] for e in evals.values()] == [0, 4, 8, 12]
