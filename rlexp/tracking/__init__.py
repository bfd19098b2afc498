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
from rlexp.tracking.context import RunContext, run_context

__all__ = ["NoTracker", "Tracker", "make_tracker"]


def make_tracker(
    cfg: RlexpConfig, run_dir: Path | str, resolved: dict[str, Any], ctx: RunContext | None = None
) -> Tracker:
    """The tracker for `cfg.logger.name`; `resolved` is the whole config as plain containers.

    `ctx` is the job's place in a sweep (`rlexp.tracking.context.run_context`, read from Hydra when omitted);
    a tracker built in a child process (`rlexp.tracking.process`) is handed the trainer's.

    `run_dir` may be a local path or a URL (gs://); backends that need a local folder then use
    Hydra's job dir. wandb keeps its run id in `<run_dir>/wandb_run.json` for resumes.
    """
    name = cfg.logger.name
    if name == "none":
        return NoTracker()
    if name not in ("wandb", "tensorboard"):
        raise ConfigError("logger.name", name, "use one of none, wandb, tensorboard")
    if ctx is None:
        ctx = run_context(cfg)
    if name == "wandb":
        from rlexp.tracking.wandb_tracker import WandbTracker

        return WandbTracker(cfg, str(run_dir), resolved, ctx)
    from rlexp.tracking.tensorboard_tracker import TensorboardTracker

    return TensorboardTracker(cfg, str(run_dir), ctx)
