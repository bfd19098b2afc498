"""What a tracker needs to know about the job beyond the config: sweep group, job number, tags."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

# Config groups whose chosen option becomes a tag (e.g. "trainer:grpo").
TAG_GROUPS = ("model", "dataset", "slice", "reward", "chat_template", "trainer", "experiment", "sweep")


@dataclass
class RunContext:
    name: str
    group: str | None = None
    job_num: int | None = None
    overrides: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    local_dir: str = "."


def run_context(cfg: Any) -> RunContext:
    """From HydraConfig when a Hydra job is running; plain defaults otherwise (tests, notebooks)."""
    from hydra.core.hydra_config import HydraConfig

    from rlexp.sweep import context

    if not HydraConfig.initialized():
        return RunContext(name=cfg.run_name, local_dir=os.getcwd())
    hc = HydraConfig.get()
    choices = dict(hc.runtime.choices or {})
    tags = [f"{g}:{choices[g]}" for g in TAG_GROUPS if choices.get(g) not in (None, "null")]
    ctx = RunContext(
        name=cfg.run_name,
        overrides=list(hc.overrides.task),
        tags=tags,
        local_dir=str(hc.runtime.output_dir),
    )
    if context.in_multirun():
        directory = context.sweep_dir(cfg, hc.sweep.dir)
        ctx.group = context.sweep_group(cfg, directory)
        ctx.job_num = int(hc.job.num)
        ctx.name = f"{ctx.group}-{ctx.job_num}"
        ctx.tags.append(f"sweep:{context.sweep_name(cfg)}")
    return ctx
