"""TrackerProcess: the backend runs in a child process (`python -m rlexp.tracking.worker`) that gets every row in
order, creates nothing for a run that never starts, outlives no trainer, and reports its errors as one line."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rlexp.errors import RunError
from rlexp.tracking.process import TrackerProcess
from tests.tracking.recorder import calls

RECORDER = "tests.tracking.recorder:Recorder"
QUICK = "recorder"  # a logger name the child preloads nothing for (wandb: ~1.2 s per test)


def test_rows_reach_the_backend_in_a_child_process_in_order_then_the_summary(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    tracker = TrackerProcess("wandb").start(RECORDER, str(record))
    metrics = {"loss": 1.0}
    tracker.log(0, metrics)
    metrics["loss"] = 2.0  # the caller may reuse its dict: the row sent keeps what was logged
    for step in range(1, 201):
        tracker.log(step, {"step": float(step)})
    tracker.finish({"status": "completed"}, 0)
    got = calls(record)
    assert {pid for _, pid, *_ in got} == {tracker._proc.pid} != {os.getpid()}
    assert got[0][0] == "start" and got[1] == ["log", tracker._proc.pid, 0, {"loss": 1.0}]
    assert [c[2] for c in got[2:-1]] == list(range(1, 201))
    assert got[-1] == ["finish", tracker._proc.pid, {"status": "completed"}, 0]
    assert tracker._proc.returncode == 0


@pytest.mark.slow
def test_a_backend_that_stops_reading_never_holds_the_training_loop(tmp_path: Path) -> None:
    """A stalled backend lets the pipe fill (64 KiB, ~40 rows here); the rows queue in this process instead."""
    record = tmp_path / "calls.jsonl"
    tracker = TrackerProcess(QUICK).start(RECORDER, str(record), None, 0.0, (1, 6.0))
    row = {f"metric/{i}": float(i) for i in range(60)}
    for step in range(1, 301):  # ~600 KiB of rows while the backend sleeps in step 1
        tracker.log(step, row)
    assert [c[0] for c in calls(record)] == ["start"]  # every call returned before the backend read on
    tracker.finish({}, 0)
    assert [c[2] for c in calls(record)[1:-1]] == list(range(1, 301))


def test_the_first_log_waits_for_the_backend_to_start(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    tracker = TrackerProcess(QUICK).start(RECORDER, str(record), None, 1.0)
    first = threading.Thread(target=tracker.log, args=(0, {"eval/pass_at_1": 0.2}))
    first.start()
    first.join(0.3)
    assert first.is_alive() and not record.exists()  # the eval before training waits for the backend
    first.join(30)
    assert not first.is_alive()
    tracker.finish({}, 0)
    assert [c[0] for c in calls(record)] == ["start", "log", "finish"]


def test_a_start_up_error_fails_the_first_log_as_one_line_naming_the_logger(tmp_path: Path) -> None:
    tracker = TrackerProcess("wandb").start(RECORDER, str(tmp_path / "calls.jsonl"), "start")
    with pytest.raises(RunError, match=r"^logger=wandb: PermissionError: wandb: 401 Unauthorized\n") as err:
        tracker.log(0, {"eval/pass_at_1": 0.2})  # the eval before training: no step has run
    assert "Traceback" in err.value.__notes__[0]  # the child's traceback, shown with --debug
    assert tracker._proc.returncode == 1


def test_finish_raises_the_start_up_error(tmp_path: Path) -> None:
    tracker = TrackerProcess("tensorboard").start(RECORDER, str(tmp_path / "calls.jsonl"), "start")
    with pytest.raises(RunError, match="logger=tensorboard: PermissionError"):
        tracker.finish({}, 1)  # a run that ends before its first log


def test_a_log_error_surfaces_at_the_next_call(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    tracker = TrackerProcess(QUICK).start(RECORDER, str(record), 2)
    tracker.log(1, {"a": 1.0})
    tracker.log(2, {"a": 2.0})
    tracker._proc.wait(30)  # the child reported the error and stopped
    with pytest.raises(RunError, match="logger=recorder: ConnectionError: wandb service went away"):
        tracker.log(3, {"a": 3.0})
    assert [c[0] for c in calls(record)] == ["start", "log"]


def test_a_tracker_closed_before_its_start_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A config the data or the model refuses: the child already imported wandb, and leaves quietly. It writes
    nothing where it runs (wandb puts a run's files under ./wandb unless told otherwise) and prints nothing
    (the child shares the trainer's stderr: a traceback or a wandb banner would reach the user)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    tracker = TrackerProcess("wandb")
    tracker.close()
    assert tracker._proc.returncode == 0
    assert not list(tmp_path.iterdir())
    assert capfd.readouterr() == ("", "")


def test_a_trainer_that_dies_leaves_its_run_finished_as_failed(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    tracker = TrackerProcess(QUICK).start(RECORDER, str(record))
    tracker.log(1, {"a": 1.0})
    tracker._proc.stdin.close()  # what the child sees when the trainer's process ends without a finish
    assert tracker._proc.wait(30) == 0
    call, _pid, *args = calls(record)[-1]
    assert (call, args) == ("finish", [{}, 1])


def test_the_child_leaves_interrupts_and_stop_signals_to_the_trainer(tmp_path: Path) -> None:
    """Ctrl-C and Slurm's SIGTERM reach every process of the job; the trainer checkpoints and then finishes."""
    record = tmp_path / "calls.jsonl"
    tracker = TrackerProcess(QUICK).start(RECORDER, str(record))
    tracker.log(1, {"a": 1.0})
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2):
        os.kill(tracker._proc.pid, sig)
    time.sleep(0.3)
    assert tracker._proc.poll() is None
    tracker.log(2, {"a": 2.0})
    tracker.finish({"status": "interrupted"}, 1)
    assert [c[0] for c in calls(record)] == ["start", "log", "log", "finish"]
