"""Experiment trackers. The trainer talks to one `Tracker`; backends are chosen by `logger.name`.

metrics.jsonl / summary.json in the run dir are written by the trainer regardless of the
tracker, so reports never depend on a tracking service. Metric names are the run-dir names
everywhere (metrics.jsonl, wandb, TensorBoard).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError
from rlexp.tracking.base import NoTracker, Tracker

__all__ = ["NoTracker", "Tracker", "make_tracker"]


def make_tracker(cfg: RlexpConfig, run_dir: Path | str, resolved: dict[str, Any], background: bool = False) -> Tracker:
    """The tracker for `cfg.logger.name`; `resolved` is the whole config as plain containers.

    `background=True` starts the backend on a thread (rlexp.tracking.background) and returns at once.

    `run_dir` may be a local path or a URL (gs://); backends that need a local folder then use
    Hydra's job dir. wandb keeps its run id in `<run_dir>/wandb_run.json` for resumes.
    """
    name = cfg.logger.name
    if name == "none":
        return NoTracker()
    from rlexp.tracking.context import run_context

    ctx = run_context(cfg)
    if name not in ("wandb", "tensorboard"):
        raise ConfigError("logger.name", name, "use one of none, wandb, tensorboard")

    def build() -> Tracker:
        if name == "wandb":
            from rlexp.tracking.wandb_tracker import WandbTracker

            return WandbTracker(cfg, str(run_dir), resolved, ctx)
        from rlexp.tracking.tensorboard_tracker import TensorboardTracker

        return TensorboardTracker(cfg, str(run_dir), ctx)

    if background:
        from rlexp.tracking.background import BackgroundTracker

        return BackgroundTracker(build)
    return build()
