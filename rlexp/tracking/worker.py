"""The child process that hosts a tracker backend for `rlexp.tracking.process.TrackerProcess`.

Run as `python -m rlexp.tracking.worker`. It imports the backend's module at once (wandb: ~1.2 s) while the
trainer imports JAX and loads its models, then waits for `("start", factory, args)`; if its stdin closes
first (a refused config, a failed set-up), it exits without having created a run. After the start it reads
`("log", step, metrics)` and `("finish", summary, exit_code)` messages in order. Replies go back on the
original stdout as pickled tuples: `("ready",)`, `("done",)` or `("error", kind, message, traceback)`;
anything the backend prints goes to stderr, so it cannot corrupt them.

The trainer owns the run's signals: SIGINT, SIGTERM and submitit's SIGUSR1/2 reach every process of a
terminal or a Slurm step, and the trainer answers them with a checkpoint and a finish message, so this
process ignores them. When the trainer dies without a finish (stdin closes), the run is finished as failed,
and the process ends at most `_GRACE_S` after the trainer, whatever the backend is doing (rlexp.children).
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import signal
import sys
import traceback
from typing import Any, BinaryIO

_GRACE_S = 15.0  # after the trainer is gone, for the backend to finish the run as failed
PRELOAD = {"wandb": "wandb", "tensorboard": "tensorboardX"}  # module each backend imports at start-up


def _reply(out: BinaryIO, *message: Any) -> None:
    pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def _error(out: BinaryIO, err: BaseException) -> None:
    _reply(out, "error", type(err).__name__, str(err), "".join(traceback.format_exception(err)))


def _resolve(factory: str) -> Any:
    module, _, name = factory.partition(":")
    return getattr(importlib.import_module(module), name)


def serve(inbox: BinaryIO, out: BinaryIO) -> int:
    """Read messages from `inbox` until finish or end of input; the process's exit status."""
    tracker = None
    while True:
        try:
            message = pickle.load(inbox)
        except EOFError:  # the trainer is gone: before the start nothing was created
            if tracker is not None:
                tracker.finish({}, exit_code=1)
            return 0
        kind = message[0]
        try:
            if kind == "start":
                _, factory, args = message
                tracker = _resolve(factory)(*args)
                _reply(out, "ready")
            elif kind == "log":
                tracker.log(message[1], message[2])
            elif kind == "finish":
                tracker.finish(message[1], exit_code=message[2])
                _reply(out, "done")
                return 0
        except BaseException as err:  # noqa: BLE001 - sent to the trainer, which raises it as one line
            _error(out, err)
            return 1


def main() -> int:
    from rlexp.children import watch_parent

    watch_parent(_GRACE_S)  # the trainer killed: finish the run as failed (end of input), but never linger
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a backend's prints go to the console, not the replies
    module = PRELOAD.get(sys.argv[1] if len(sys.argv) > 1 else "")
    if module is not None:
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # the backend's own import reports it at the start, as one error
    return serve(sys.stdin.buffer, out)


def _end_now(status: list[int]) -> None:
    # registered first, so it runs after wandb's exit handler (which waits for its service to write the run):
    # then the process ends without freeing every module one by one (~0.3 s the trainer would wait for)
    sys.stderr.flush()
    os._exit(status[0])


if __name__ == "__main__":
    status = [1]
    atexit.register(_end_now, status)
    status[0] = main()
    sys.exit(status[0])
