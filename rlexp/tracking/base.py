"""The interface the trainer logs through, and the tracker of `logger=none`."""

from __future__ import annotations

from typing import Any, Protocol


class Tracker(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...
    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None: ...


class NoTracker:
    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        pass
