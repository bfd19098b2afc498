"""Experiment trackers. The trainer talks to one `Tracker`; backends are chosen by `logger.name`.

metrics.jsonl / summary.json in the run dir are written by the trainer regardless of the
tracker, so reports never depend on a tracking service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from rlexp.config.schema import RlexpConfig


class Tracker(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...
    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None: ...


class NoTracker:
    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        pass


def make_tracker(cfg: RlexpConfig, run_dir: Path, resolved: dict[str, Any]) -> Tracker:
    """The tracker for `cfg.logger.name`; `resolved` is the whole config as plain containers."""
    if cfg.logger.name == "none":
        return NoTracker()
    raise NotImplementedError(f"logger {cfg.logger.name!r}")
