"""A run dir holds one run at a time: a second run is refused naming the owner, a stale lock is taken over,
and a finished run's rerun says so and changes nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlexp.errors import RunError
from rlexp.train import runlock
from tests.cli.conftest import TRAIN
from tests.cli.test_bad_inputs import tree_hash
from tests.cli.test_failure_paths import one_line, rlexp


@pytest.mark.slow
def test_a_finished_runs_rerun_says_so_and_changes_nothing(trained_run: Path) -> None:
    before = tree_hash(trained_run)
    proc = rlexp(*TRAIN, f"hydra.run.dir={trained_run}", cwd=trained_run.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "completed earlier after 3 steps" in proc.stdout and "nothing to do" in proc.stdout
    assert tree_hash(trained_run) == before, "a rerun of a finished run changed its dir"


@pytest.mark.slow
def test_a_second_run_into_a_locked_dir_is_one_line_naming_the_owner(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = tmp_path / "run"
        run.mkdir()
        lock = {"host": socket.gethostname(), "pid": owner.pid, "started": "now"}
        (run / runlock.LOCK).write_text(json.dumps(lock))
        before = tree_hash(run)
        proc = rlexp(*TRAIN, f"hydra.run.dir={run}", cwd=tmp_path)
        line = one_line(proc)
        assert proc.returncode == 1 and f"pid {owner.pid}" in line and f"hydra.run.dir={run}" in line, line
        assert tree_hash(run) == before, "a refused run wrote into the locked dir"
    finally:
        owner.kill()
        owner.wait()


def test_a_stale_lock_is_taken_over_and_released(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / runlock.LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": gone.pid}))
    runlock.take(str(tmp_path))
    assert json.loads((tmp_path / runlock.LOCK).read_text())["pid"] == os.getpid()
    runlock.release(str(tmp_path))
    assert not (tmp_path / runlock.LOCK).exists()


def test_a_lock_of_another_host_is_not_taken(tmp_path: Path) -> None:
    (tmp_path / runlock.LOCK).write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": "t"}))
    with pytest.raises(RunError, match="host elsewhere, pid 1"):
        runlock.take(str(tmp_path))


@pytest.mark.slow
def test_ctrl_c_twice_stops_at_once_in_one_line_leaving_no_unfinished_checkpoint(tmp_path: Path) -> None:
    import time

    from tests.helpers import ctrl_c_twice, start_rlexp

    run = tmp_path / "run"
    args = ["-q", "trainer.max_steps=40", "trainer.checkpoint_every=2", "trainer.eval_every=2", "logger=none"]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = start_rlexp(*args, f"hydra.run.dir={run}", cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        metrics = run / "metrics.jsonl"
        while time.monotonic() < deadline and not (metrics.exists() and '"step": 3' in metrics.read_text()):
            time.sleep(0.1)
        ctrl_c_twice(proc)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    errors = [ln for ln in err.splitlines() if ln.startswith("rlexp: error: ")]
    assert proc.returncode == 130 and len(errors) == 1 and "Traceback" not in err, err[-3000:]
    assert "interrupted" in errors[0] and "rerun the same command" in errors[0], errors  # either press's moment
    assert not list((run / "checkpoints" / "actor").glob("*orbax-checkpoint-tmp*"))
