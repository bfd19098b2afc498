"""BackgroundTracker: the backend, built and fed on its own thread, gets every row in order, and its errors."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rlexp.tracking.background import BackgroundTracker


class Recorder:
    def __init__(self, fail_at: int | None = None) -> None:
        self.logged: list[tuple[int, dict[str, float], str]] = []
        self.finished: tuple[dict[str, Any], int] | None = None
        self.built_on = threading.current_thread().name
        self.fail_at = fail_at

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if step == self.fail_at:
            raise ConnectionError("wandb service went away")
        self.logged.append((step, metrics, threading.current_thread().name))

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        self.finished = (summary, exit_code)


def test_rows_logged_while_starting_arrive_in_order_on_the_worker() -> None:
    go = threading.Event()
    built: list[Recorder] = []

    def build() -> Recorder:
        go.wait(10)
        built.append(Recorder())
        return built[0]

    tracker = BackgroundTracker(build)
    metrics = {"loss": 1.0}
    tracker.log(0, metrics)
    metrics["loss"] = 2.0  # the caller may reuse its dict: the queued copy keeps what was logged
    tracker.log(1, {"loss": 3.0})
    assert not built  # still starting: both calls returned without waiting for the backend
    go.set()
    tracker.finish({"status": "completed"}, 0)
    [rec] = built
    assert rec.built_on == "rlexp-tracker"
    assert rec.logged == [(0, {"loss": 1.0}, "rlexp-tracker"), (1, {"loss": 3.0}, "rlexp-tracker")]
    assert rec.finished == ({"status": "completed"}, 0)
    assert not tracker._thread.is_alive()


def test_finish_waits_for_every_queued_row() -> None:
    rec = Recorder()
    tracker = BackgroundTracker(lambda: rec)
    for step in range(1, 201):
        tracker.log(step, {"step": float(step)})
    tracker.finish({}, 1)
    assert [s for s, _, _ in rec.logged] == list(range(1, 201))
    assert rec.finished == ({}, 1)


def test_a_start_up_error_surfaces_on_the_callers_thread() -> None:
    def build() -> Recorder:
        raise PermissionError("wandb: 401 Unauthorized")

    tracker = BackgroundTracker(build)
    tracker._thread.join()
    with pytest.raises(PermissionError, match="401"):
        tracker.log(1, {"loss": 0.0})


def test_finish_raises_the_start_up_error() -> None:
    go = threading.Event()

    def build() -> Recorder:
        go.wait(10)
        raise RuntimeError("service did not start")

    tracker = BackgroundTracker(build)
    tracker.log(1, {"loss": 0.0})  # queued: the backend is not up yet
    go.set()
    with pytest.raises(RuntimeError, match="service did not start"):
        tracker.finish({}, 0)


def test_a_log_error_stops_the_worker_and_surfaces_at_the_next_call() -> None:
    rec = Recorder(fail_at=2)
    tracker = BackgroundTracker(lambda: rec)
    tracker.log(1, {"a": 1.0})
    tracker.log(2, {"a": 2.0})
    tracker._thread.join()
    with pytest.raises(ConnectionError, match="went away"):
        tracker.log(3, {"a": 3.0})
    assert [s for s, _, _ in rec.logged] == [1] and rec.finished is None
