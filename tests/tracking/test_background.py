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


def test_the_first_log_waits_for_the_start_then_rows_arrive_in_order_on_the_worker() -> None:
    go = threading.Event()
    built: list[Recorder] = []

    def build() -> Recorder:
        go.wait(10)
        built.append(Recorder())
        return built[0]

    tracker = BackgroundTracker(build)
    metrics = {"loss": 1.0}
    first = threading.Thread(target=tracker.log, args=(0, metrics))
    first.start()
    first.join(0.3)
    assert first.is_alive() and not built  # the eval before training waits for the backend to be up
    go.set()
    first.join(10)
    assert not first.is_alive()
    metrics["loss"] = 2.0  # the caller may reuse its dict: the queued copy keeps what was logged
    tracker.log(1, {"loss": 3.0})
    tracker.finish({"status": "completed"}, 0)
    [rec] = built
    assert rec.built_on == "rlexp-tracker"
    assert rec.logged == [(0, {"loss": 1.0}, "rlexp-tracker"), (1, {"loss": 3.0}, "rlexp-tracker")]
    assert rec.finished == ({"status": "completed"}, 0)
    assert not tracker._thread.is_alive()


def test_later_logs_only_queue_the_row() -> None:
    release = threading.Event()

    class Slow(Recorder):
        def log(self, step: int, metrics: dict[str, float]) -> None:
            release.wait(10)  # a backend busy sending an earlier row
            super().log(step, metrics)

    rec = Slow()
    tracker = BackgroundTracker(lambda: rec)
    for step in range(1, 6):
        tracker.log(step, {"a": float(step)})  # returns while the worker is stuck on step 1
    assert rec.logged == []
    release.set()
    tracker.finish({}, 0)
    assert [s for s, _, _ in rec.logged] == [1, 2, 3, 4, 5]


def test_finish_waits_for_every_queued_row() -> None:
    rec = Recorder()
    tracker = BackgroundTracker(lambda: rec)
    for step in range(1, 201):
        tracker.log(step, {"step": float(step)})
    tracker.finish({}, 1)
    assert [s for s, _, _ in rec.logged] == list(range(1, 201))
    assert rec.finished == ({}, 1)


def test_a_start_up_error_fails_the_first_log_on_the_callers_thread() -> None:
    go = threading.Event()

    def build() -> Recorder:
        go.wait(10)
        raise PermissionError("wandb: 401 Unauthorized")

    tracker = BackgroundTracker(build)
    threading.Timer(0.2, go.set).start()
    with pytest.raises(PermissionError, match="401"):
        tracker.log(0, {"eval/pass_at_1": 0.2})  # the eval before training: no step has run


def test_finish_raises_the_start_up_error() -> None:
    def build() -> Recorder:
        raise RuntimeError("service did not start")

    tracker = BackgroundTracker(build)
    with pytest.raises(RuntimeError, match="service did not start"):
        tracker.finish({}, 1)  # a run that ends before its first log


def test_a_log_error_stops_the_worker_and_surfaces_at_the_next_call() -> None:
    rec = Recorder(fail_at=2)
    tracker = BackgroundTracker(lambda: rec)
    tracker.log(1, {"a": 1.0})
    tracker.log(2, {"a": 2.0})
    tracker._thread.join()
    with pytest.raises(ConnectionError, match="went away"):
        tracker.log(3, {"a": 3.0})
    assert [s for s, _, _ in rec.logged] == [1] and rec.finished is None
