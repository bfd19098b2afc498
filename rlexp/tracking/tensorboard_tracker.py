"""TensorBoard tracker: scalars under `<run dir>/tensorboard/` with the run-dir metric names."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rlexp import storage
from rlexp.config.schema import RlexpConfig
from rlexp.tracking.context import RunContext


class TensorboardTracker:
    def __init__(self, cfg: RlexpConfig, run_dir: str, ctx: RunContext) -> None:
        from tensorboardX import SummaryWriter

        base = cfg.logger.dir or (run_dir if not storage.is_url(run_dir) else ctx.local_dir)
        self.logdir = str(Path(base) / "tensorboard")
        self.writer = SummaryWriter(logdir=self.logdir)
        self.writer.add_text("config/overrides", " ".join(ctx.overrides) or "(none)", 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(name, float(value), int(step))
        self.writer.flush()

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        objective = summary.get("objective")
        if isinstance(objective, dict) and isinstance(objective.get("value"), int | float):
            self.writer.add_scalar(
                "objective", float(objective["value"]), int((summary.get("train") or {}).get("steps", 0))
            )
        self.writer.close()
