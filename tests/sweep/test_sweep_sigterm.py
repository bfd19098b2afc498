"""SIGTERM to a sweep of the basic launcher stops the sweep, not only its running job: the job saves its
checkpoint, the rest stay pending in sweep.json, and the command says how to finish it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import start_rlexp


@pytest.mark.slow
def test_sigterm_stops_the_sweep_and_records_the_rest_pending(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = start_rlexp(
        "-m", "seed=1,2,3", "trainer.max_steps=30", "trainer.checkpoint_every=10", "trainer.eval_every=10",
        "logger=none", "sweep.report=false", f"hydra.sweep.dir={sweep}",
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        metrics = sweep / "0" / "metrics.jsonl"
        while time.monotonic() < deadline and not (metrics.exists() and '"step": 2' in metrics.read_text()):
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    lines = [ln for ln in err.splitlines() if ln.startswith("rlexp: error: ")]
    assert proc.returncode == 1 and len(lines) == 1 and "sweep stopped by SIGTERM in job 0" in lines[0], err[-3000:]
    assert "sweep.resume=true" in lines[0] and "Traceback" not in err
    data = json.loads((sweep / "sweep.json").read_text())
    assert data["state"] == "interrupted"
    assert [j["state"] for j in data["jobs"]] == ["pending", "pending", "pending"]
    assert not (sweep / "1").exists(), "the sweep trained the next job after SIGTERM"
    assert list((sweep / "0" / "checkpoints" / "actor").iterdir()), "the stopped job saved no checkpoint"
