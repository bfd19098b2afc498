"""SIGKILL in the middle of a checkpoint save leaves the previous checkpoint restorable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, SHORT, run_rlexp

pytestmark = pytest.mark.slow

# Runs `python -m rlexp` with orbax's save wrapped: right after the step-8 save is started (its
# files are being written by orbax's background thread), the process is killed with SIGKILL.
DRIVER = """
import os, runpy, signal, sys
import tunix.sft.checkpoint_manager as cm
original = cm.CheckpointManager.save
def save(self, step, *args, **kwargs):
    started = original(self, step, *args, **kwargs)
    if started and step == 8:
        os.kill(os.getpid(), signal.SIGKILL)
    return started
cm.CheckpointManager.save = save
sys.argv = ["rlexp", *sys.argv[1:]]
runpy.run_module("rlexp", run_name="__main__", alter_sys=True)
"""


def test_kill_during_save_then_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [*SHORT, "trainer.max_steps=12", f"hydra.run.dir={run_dir}"]
    killed = subprocess.run(
        [sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (run_dir / "summary.json").exists()
    finished = [p.name for p in (run_dir / "checkpoints" / "actor").iterdir() if p.name.isdigit()]
    assert "4" in finished

    resumed = run_rlexp(*args)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    restored = 8 if "8" in finished else 4  # orbax publishes a step only once it is complete
    assert f"resuming {run_dir} from step {restored}" in resumed.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 12
    # one record per step (step 0 = the eval before training): nothing lost, nothing written twice
    steps = [json.loads(ln)["step"] for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(0, 13))
