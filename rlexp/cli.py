"""The entry layer's error handling, shared by every command (`python -m rlexp`, validate, report, export,
jobs, serve_reward): a user error ends with one line, `rlexp: error: <key>=<value>: <what>; <fix>`.

`RlexpError` from any layer is printed as it is. Mistakes Hydra catches while composing (unknown option,
unknown key, wrong type) arrive as Hydra's multi-line reports and are translated here. Anything else keeps
its traceback, and HYDRA_FULL_ERROR=1 keeps the traceback for every error.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import TypeVar

from rlexp.errors import RlexpError, exit_with_message, print_error

T = TypeVar("T")

_MISSING_OPTION = re.compile(
    r"Could not find '([^']+)/([^']+)'.*?Available options in '[^']+':\n(.*?)(?:\nConfig search path|\Z)", re.S
)
_UNKNOWN_KEY = re.compile(r"Could not override '([^']+)'")


def one_line(ex: BaseException) -> str | None:
    """The one-line message for a user error, or None when it is not one rlexp knows."""
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(ex, RlexpError):
        return str(ex)
    text = str(ex)
    m = _MISSING_OPTION.search(text)
    if isinstance(ex, MissingConfigException) and m:
        group, option = m.group(1), m.group(2)
        options = [o.strip() for o in m.group(3).split() if o.strip() and not o.strip().endswith("_schema")]
        return f"{group}={option!r}: no such option; use one of {', '.join(options)}"
    cause = ex.__cause__ if isinstance(ex.__cause__, OmegaConfBaseException) else None
    if isinstance(ex, ConfigCompositionException) and cause is not None:
        key = getattr(cause, "full_key", None) or ""
        reason = str(cause).splitlines()[0].strip()
        unknown = _UNKNOWN_KEY.search(text)
        if unknown and unknown.group(1):
            name = unknown.group(1)
            return f"{name}: no such key ({reason}); check the spelling, or add a new key with +{name}=..."
        override = re.search(r"override (\S+)=(\S*)", text)
        value = override.group(2) if override else None
        return f"{key or (override.group(1) if override else '?')}={value!r}: {reason}"
    return None


def _report(ex: BaseException) -> bool:
    message = None if os.environ.get("HYDRA_FULL_ERROR") == "1" else one_line(ex)
    if message is None:
        return False
    exit_with_message(RlexpError(message))
    return True


def install() -> None:
    """Report errors inside Hydra apps (composition, task function, launchers) through `one_line`.
    Call before a `hydra.main` function runs."""
    from rlexp.compat.hydra import wrap_error_reporting

    wrap_error_reporting(_report)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Inside a Hydra task function: a user error is one line and exit code 2. (Hydra would first print
    "Error executing job with overrides: ..." for an exception that leaves the task function.)"""
    try:
        yield
    except RlexpError as err:
        exit_with_message(err)


def run(main: Callable[[], T]) -> T:
    """Run a Hydra app: a user error is one line and exit code 2, not a traceback."""
    install()
    try:
        return main()
    except RlexpError as err:
        exit_with_message(err)
        raise  # unreachable: exit_with_message exits or re-raises


def command(main: Callable[[], int]) -> int:
    """Run a command-line tool's main function; a user error is one line and exit code 2."""
    try:
        return main()
    except RlexpError as err:
        print_error(err)
        return 2
