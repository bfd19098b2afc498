"""Weights & Biases tracker: offline unless WANDB_API_KEY is set, one wandb run per job.

The run id is kept in `<run dir>/wandb_run.json`, so a job that resumes (preemption, sweep
resume) appends to the same wandb run instead of starting a new one. Metrics are logged with
their run-dir names plus `rl_step` as the step metric (never wandb's own step, which silently
drops lower steps after a resume).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlexp import storage
from rlexp.config.load import flatten
from rlexp.config.schema import RlexpConfig
from rlexp.tracking.context import RunContext

RUN_FILE = "wandb_run.json"
STEP_METRIC = "rl_step"


def resolve_mode(mode: str) -> str:
    """auto → online with WANDB_API_KEY, else offline; WANDB_MODE in the environment wins over both."""
    env = os.environ.get("WANDB_MODE")
    if env:
        return env
    if mode == "auto":
        return "online" if os.environ.get("WANDB_API_KEY") else "offline"
    return mode


class WandbTracker:
    def __init__(self, cfg: RlexpConfig, run_dir: str, resolved: dict[str, Any], ctx: RunContext) -> None:
        import wandb
        import wandb.util

        # wandb imports pandas (~0.4 s) at the first summary write only to ask whether a value is a DataFrame;
        # without it, wandb asks by the value's type name, which answers the same (rlexp logs plain scalars)
        wandb.util.pd_available = False
        self.run_dir = run_dir
        previous = storage.read_json(storage.join(run_dir, RUN_FILE)) or {}
        local_dir = cfg.logger.dir or (run_dir if not storage.is_url(run_dir) else ctx.local_dir)
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        mode = resolve_mode(cfg.logger.mode)
        config = flatten(resolved)
        config.update({"_rlexp.overrides": ctx.overrides, "_rlexp.job_num": ctx.job_num, "_rlexp.run_dir": run_dir})
        self.run = wandb.init(
            project=cfg.logger.project,
            entity=cfg.logger.entity,
            group=cfg.logger.group or ctx.group,
            job_type=cfg.logger.job_type or f"{cfg.trainer.algorithm}-train",
            name=ctx.name,
            tags=sorted({*cfg.logger.tags, *ctx.tags})[:64],
            config=config,
            dir=local_dir,
            mode=mode,
            id=previous.get("id"),
            resume="allow" if previous.get("id") else None,
            reinit="finish_previous",  # jobs of an in-process multirun each get their own run
            # The console belongs to rlexp's progress bar and summary; wandb's banner and run
            # summary tables would bury them (warnings and errors still print).
            settings=wandb.Settings(quiet=True),
        )
        self.run.define_metric(STEP_METRIC)
        self.run.define_metric("*", step_metric=STEP_METRIC)
        record = {
            "id": self.run.id,
            "project": cfg.logger.project,
            "entity": cfg.logger.entity,
            "group": cfg.logger.group or ctx.group,
            "mode": mode,
            "dir": str(local_dir),
            "resumed": bool(previous.get("id")),
        }
        storage.write_json(storage.join(run_dir, RUN_FILE), record)
        self._finished = False

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({**metrics, STEP_METRIC: int(step)})

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            for key, value in flatten(summary).items():
                if isinstance(value, int | float | str | bool) or value is None:
                    self.run.summary[key] = value
            objective = summary.get("objective")
            if isinstance(objective, dict) and objective.get("name"):
                self.run.summary[str(objective["name"])] = objective.get("value")
        finally:
            self.run.finish(exit_code=exit_code)
