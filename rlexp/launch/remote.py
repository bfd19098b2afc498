"""A single run (no `-m`) whose launcher is remote: on the laptop, a TPU slice selects `gke`, so
`python -m rlexp slice=v6e-32` submits through the launcher code instead of training here.
Inside the pod or Slurm job the same command trains (rlexp.train.distributed.in_cluster_job).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from rlexp.errors import RlexpError
from rlexp.train.distributed import in_cluster_job


def remote_launcher() -> str | None:
    """The remote launcher this single run is handed to ("gke"), or None when it trains here; a single run
    whose launcher is Slurm's is refused in one line."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if in_cluster_job() or not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.RUN:
        return None
    target = str(hc.launcher.get("_target_", ""))
    if target.endswith("GkeLauncher"):
        return "gke"
    from rlexp.launch.slurm_cluster import is_slurm_launcher

    if "submitit" in target or is_slurm_launcher(target):
        raise RlexpError("Slurm submission runs through Hydra's multirun: add -m (one job per override combination)")
    return None


def submit(cfg: DictConfig, launcher: str) -> Any:
    """Hand this single run to `launcher` (remote_launcher's answer); the launcher's result."""
    from rlexp.launch.gke import launch_single

    assert launcher == "gke", launcher
    return launch_single(cfg)
