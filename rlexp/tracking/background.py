"""Run a tracker on a thread of its own, so the training loop never waits for it.

wandb's start-up (import, service process, run creation) took ~1.7 s before the eval that precedes training,
and each `log` ~1-3 ms of the step, handing the row to wandb's service. Here the backend is built and fed
on a worker thread, whose Python runs while the main thread waits in compiled programs (on a fresh clone, the
eval before training compiles for seconds), which release the GIL. The first `log` (the eval before
training) waits until the backend is up, so one that cannot start (a wrong API key) fails the run before any
step, as a synchronous start did; later calls only queue a copy of the row. Rows reach the backend in order;
`finish` waits for all of them. An error raised by the backend surfaces at the next `log` or at `finish`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from rlexp.tracking.base import Tracker


class BackgroundTracker:
    """A `Tracker` whose backend is built by `build`, then logged to and finished, on a daemon thread."""

    def __init__(self, build: Callable[[], Tracker]) -> None:
        self._queue: queue.SimpleQueue[tuple[str, tuple[Any, ...]]] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._started = threading.Event()  # set once the backend is built, or failed to be
        self._thread = threading.Thread(target=self._work, args=(build,), name="rlexp-tracker", daemon=True)
        self._thread.start()

    def _work(self, build: Callable[[], Tracker]) -> None:
        # errors are kept before _started is set, so the first log() sees a failed start
        try:
            tracker = build()
        except BaseException as err:  # noqa: BLE001 - re-raised on the caller's thread
            self._error = err
            return
        finally:
            self._started.set()
        try:
            while True:
                call, args = self._queue.get()
                if call == "log":
                    tracker.log(*args)
                else:
                    tracker.finish(*args)
                    return
        except BaseException as err:  # noqa: BLE001 - re-raised on the caller's thread
            self._error = err

    def _raise_error(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._started.wait()  # returns at once after the first call
        self._raise_error()
        self._queue.put(("log", (step, dict(metrics))))

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        self._queue.put(("finish", (summary, exit_code)))
        self._thread.join()
        self._raise_error()
