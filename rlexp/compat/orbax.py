"""Orbax 0.12 / TensorStore behaviour around a checkpoint that cannot be read.

A restore reads every array in its own coroutine on an event loop of its own. When one read fails, orbax
raises that error, closes the loop and drops the other reads. Their leftovers then reach
`sys.unraisablehook`, often around rlexp's one-line error, and only repeat the error already raised:
- each abandoned coroutine ("Exception ignored in: <coroutine ...>" and a TensorStore spec hundreds of
  lines long);
- each TensorStore read that completes afterwards, whose callback (on a TensorStore thread) calls
  `loop.call_soon_threadsafe` on the closed loop ("RuntimeError: Event loop is closed");
and asyncio logs each other failed read's task, future or gather ("Task / Future / _GatheringFuture exception was
never retrieved", the same spec). Such a report names no orbax file. Its exception's traceback does when orbax
raised it; when TensorStore set it from its own thread (the read failed after orbax stopped waiting) it has no
traceback, and only its message tells: an absl status code, "OUT_OF_RANGE: Error reading ... in OCDBT database".
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from typing import Any

_installed = False
# asyncio's report of a task, future or gather it dropped: "<its class name> exception was never retrieved"
_NEVER_RETRIEVED = re.compile(r"\w+ exception was never retrieved")
# absl's canonical status codes, which TensorStore puts first in every error it raises into Python
_TENSORSTORE_STATUS = re.compile(
    r"(CANCELLED|UNKNOWN|INVALID_ARGUMENT|DEADLINE_EXCEEDED|NOT_FOUND|ALREADY_EXISTS|PERMISSION_DENIED"
    r"|RESOURCE_EXHAUSTED|FAILED_PRECONDITION|ABORTED|OUT_OF_RANGE|UNIMPLEMENTED|INTERNAL|UNAVAILABLE"
    r"|DATA_LOSS|UNAUTHENTICATED): "
)


def _leftover(unraisable: Any) -> bool:
    code = getattr(unraisable.object, "cr_code", None)
    if code is not None and "/orbax/" in code.co_filename:
        return True
    value = unraisable.exc_value
    return (
        isinstance(value, RuntimeError)
        and str(value) == "Event loop is closed"
        and any(frame.name == "call_soon_threadsafe" for frame in traceback.extract_tb(unraisable.exc_traceback))
    )


def _raised_in_orbax(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 8:  # the error and what it was raised from
        if any("/orbax/" in frame.filename for frame in traceback.extract_tb(exc.__traceback__)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _keep_unless_orbax_task(record: logging.LogRecord) -> bool:
    text = record.getMessage()
    if not _NEVER_RETRIEVED.match(text):
        return True
    exc = record.exc_info[1] if record.exc_info else None
    return not ("/orbax/" in text or _raised_in_orbax(exc) or _set_by_tensorstore(exc))


def _set_by_tensorstore(exc: BaseException | None) -> bool:
    return exc is not None and exc.__traceback__ is None and bool(_TENSORSTORE_STATUS.match(str(exc)))


def drop_failed_read_leftovers() -> None:
    """From now on, drop those leftover reports; every other report goes on as before."""
    global _installed
    if _installed:
        return
    previous = sys.unraisablehook

    def on_unraisable(unraisable: Any) -> None:
        if not _leftover(unraisable):
            previous(unraisable)

    sys.unraisablehook = on_unraisable
    logging.getLogger("asyncio").addFilter(_keep_unless_orbax_task)
    _installed = True
