"""Run a tracker backend in a child process, so neither its start-up nor its logging holds the trainer's GIL.

On a thread of the trainer, wandb's start-up (`import wandb` ~1.2 s, run creation ~1 s) and each `log`
competed with set-up, tracing and the training loop for the GIL: a default run took ~3.3 s longer with wandb
than with `logger=none`. In a child process (`rlexp.tracking.worker`) they run on another core.

`TrackerProcess()` spawns the child, which imports the backend at once; `start()` hands it the run once the
data and models passed their checks, so a refused config creates no run (`close()` ends an unstarted child).
The first `log` (the eval before training) waits until the backend is up, so one that cannot start fails
the run before any step; later calls only queue the row for the pipe. Rows reach the backend in order and
`finish` waits for all of them. A backend error surfaces at the next `log` or at `finish` as a one-line
`RunError` naming the logger (the child's traceback is attached as a note, shown with --debug).
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import subprocess
import sys
import threading
from typing import Any

import rlexp
from rlexp.errors import RunError
from rlexp.redact import scrub_data

DEFAULT_FACTORY = "rlexp.tracking:make_tracker"


class TrackerProcess:
    """A `Tracker` whose backend (`logger.name`) lives in `python -m rlexp.tracking.worker`."""

    def __init__(self, name: str) -> None:
        self.name = name
        env = dict(os.environ)
        # the child imports the same rlexp as this process, wherever it was imported from
        root = os.path.dirname(os.path.dirname(os.path.abspath(rlexp.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rlexp.tracking.worker", name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._ready = False
        self._closed = False
        # Rows reach the pipe through a thread of their own: a backend that stops reading (a stalled service)
        # fills the pipe's 64 KiB, and the training loop must not wait for it.
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_all, name="rlexp-tracker-pipe", daemon=True)
        self._writer.start()

    def start(self, factory: str = DEFAULT_FACTORY, *args: Any) -> TrackerProcess:
        """Build the backend in the child as `factory(*args)` (`module:callable`; arguments are pickled)."""
        self._send("start", factory, args)
        return self

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self._ready:
            self._expect("ready")  # the first row waits for the start
            self._ready = True
        elif select.select([self._proc.stdout], [], [], 0)[0]:  # the child replied unasked: an error, or it died
            self._expect("nothing")
        self._send("log", int(step), dict(metrics))

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        if self._closed:
            return
        if not self._ready:
            self._expect("ready")
            self._ready = True
        self._send("finish", summary, exit_code)
        try:
            self._expect("done")
        finally:
            self.close()

    def close(self) -> None:
        """End the child: before `start` it creates no run; after it, the run is finished as failed."""
        if self._closed:
            return
        self._closed = True
        self._outbox.put(None)  # the writer closes the child's stdin once the rows before it are written
        self._writer.join(timeout=120)
        try:
            self._proc.stdout.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _send(self, *message: Any) -> None:
        # the backend gets the config and rows scrubbed of secrets (rlexp.redact): a key given in a reward's
        # kwargs must not reach wandb's config panel
        self._outbox.put(pickle.dumps(scrub_data(message), protocol=pickle.HIGHEST_PROTOCOL))

    def _write_all(self) -> None:
        stdin = self._proc.stdin
        try:
            while (data := self._outbox.get()) is not None:
                stdin.write(data)
                if self._outbox.empty():
                    stdin.flush()
        except (OSError, ValueError):  # the child stopped: its reply or its exit, read by the next call, says why
            pass
        finally:
            try:
                stdin.close()
            except (OSError, ValueError):
                pass

    def _expect(self, kind: str) -> None:
        try:
            reply = pickle.load(self._proc.stdout)
        except (EOFError, ValueError, OSError):
            reply = ("error", "exited", f"the tracker process stopped (exit status {self._proc.poll()})", "")
        if reply[0] == kind:
            return
        self.close()
        _, error_type, message, trace = reply
        err = RunError(f"logger={self.name}: {error_type}: {message}")
        if trace:
            err.add_note(trace)
        raise err
