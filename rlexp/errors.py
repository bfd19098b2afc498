"""User-facing errors: one line naming the key, the value and the fix; no traceback."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any


class RlexpError(Exception):
    """An error caused by user input (config, files, environment), reported as one line."""


class ConfigError(RlexpError):
    """A config value that breaks a rule; the message names key, value and fix."""

    def __init__(self, key: str, value: Any, fix: str) -> None:
        self.key, self.value, self.fix = key, value, fix
        super().__init__(f"{key}={value!r}: {fix}")


@contextlib.contextmanager
def user_errors_from_resolvers() -> Iterator[None]:
    """A ConfigError raised inside a resolver (e.g. a topology that contradicts the slice name) reaches
    us wrapped by OmegaConf, without its cause: report its message as the one-line user error it is."""
    from omegaconf.errors import InterpolationResolutionError

    try:
        yield
    except InterpolationResolutionError as err:
        msg = str(err).splitlines()[0]
        if "Error raised while resolving interpolation: " in msg:
            raise RlexpError(msg.split("raised while resolving interpolation: ", 1)[1]) from None
        raise


def exit_with_message(err: BaseException, code: int = 2) -> None:
    """Print `rlexp: error: <message>` as one line and exit; HYDRA_FULL_ERROR=1 re-raises for the traceback.

    The entry layer (rlexp.cli) reports every user error through this. Hydra callbacks call it directly:
    Hydra turns an exception raised in a callback into a warning, so a callback must end the process itself.
    """
    print_error(err)
    sys.exit(code)


def print_error(err: BaseException) -> None:
    """`rlexp: error: <message>` on stderr; HYDRA_FULL_ERROR=1 re-raises `err` to keep its traceback."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    print(f"rlexp: error: {err}", file=sys.stderr)
