"""Where a job belongs and what a tracker needs to know about it beyond the config.

The sweep dir is `sweep.dir` when set (e.g. gs://bucket/sweeps/x for GKE), else Hydra's
`hydra.sweep.dir`; a job's run dir is `output_dir` when set, else Hydra's job output dir. The
wandb group, job number and tags of a run follow from them and from Hydra's runtime choices.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from rlexp import storage


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part, None) if not isinstance(cfg, dict) else cfg.get(part)
        if cfg is None:
            return None
    return cfg


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def absolute(path: str) -> str:
    return str(path) if storage.is_url(str(path)) else os.path.abspath(str(path))


def sweep_dir(cfg: Any, hydra_sweep_dir: str | None = None) -> str:
    """The sweep root holding sweep.json. `cfg` is the task config (DictConfig or RlexpConfig)."""
    explicit = _get(cfg, "sweep.dir")
    if explicit:
        return absolute(explicit)
    if hydra_sweep_dir is None:
        hydra_sweep_dir = HydraConfig.get().sweep.dir
    return absolute(hydra_sweep_dir)


def sweep_name(cfg: Any) -> str:
    return str(_get(cfg, "sweep.name") or _get(cfg, "run_name") or "sweep")


def sweep_group(cfg: Any, directory: str) -> str:
    """The wandb group of a sweep: unique per sweep dir and stable when the sweep is resumed."""
    leaf = str(directory).rstrip("/").rsplit("/", 1)[-1]
    return f"{sweep_name(cfg)}-{leaf}"


def job_dir(cfg: Any) -> str:
    explicit = _get(cfg, "output_dir")
    if explicit:
        return absolute(explicit)
    return absolute(HydraConfig.get().runtime.output_dir)


# Config groups whose chosen option becomes a tag (e.g. "trainer:grpo").
TAG_GROUPS = ("model", "dataset", "slice", "reward", "chat_template", "data_template", "trainer", "experiment", "sweep")


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
    if in_multirun():
        directory = sweep_dir(cfg, hc.sweep.dir)
        ctx.group = sweep_group(cfg, directory)
        ctx.job_num = int(hc.job.num)
        ctx.name = f"{ctx.group}-{ctx.job_num}"
        ctx.tags.append(f"sweep:{sweep_name(cfg)}")
    return ctx
