"""User-facing errors: one line naming the key, the value and the fix; no traceback."""

from __future__ import annotations

from typing import Any


class RlexpError(Exception):
    """An error caused by user input (config, files, environment), reported as one line."""


class ConfigError(RlexpError):
    """A config value that breaks a rule; the message names key, value and fix."""

    def __init__(self, key: str, value: Any, fix: str) -> None:
        self.key, self.value, self.fix = key, value, fix
        super().__init__(f"{key}={value!r}: {fix}")
