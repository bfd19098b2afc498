"""Where a multirun job belongs: its sweep dir, wandb group and run dir, from the composed config.

The sweep dir is `sweep.dir` when set (e.g. gs://bucket/sweeps/x for GKE), else Hydra's
`hydra.sweep.dir`; a job's run dir is `output_dir` when set, else Hydra's job output dir.
"""

from __future__ import annotations

import os
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from rlexp.sweep import storage


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
