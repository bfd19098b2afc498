"""The two places `python -m rlexp` meets a cluster (called from rlexp.main.run).

On the laptop, a single run whose launcher is remote (a TPU slice selects `gke`) is submitted through the
launcher code instead of training here. Inside the pod or Slurm job, JAX is initialised for the cluster (the
trainer saves the resolved config with the run files and checkpoints on SIGTERM).
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig

from rlexp.errors import RlexpError
from rlexp.launch.manifest import IN_CLUSTER_ENV


def in_cluster_job() -> bool:
    return bool(os.environ.get(IN_CLUSTER_ENV)) or "SUBMITIT_EXECUTOR" in os.environ


def launch_remotely(cfg: DictConfig) -> tuple[bool, Any]:
    """(True, result) when this single run was handed to a remote launcher, else (False, None)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if in_cluster_job() or not HydraConfig.initialized():
        return False, None
    hc = HydraConfig.get()
    if hc.mode != RunMode.RUN:
        return False, None
    target = str(hc.launcher.get("_target_", ""))
    if target.endswith("GkeLauncher"):
        from rlexp.launch.gke import launch_single

        return True, launch_single(cfg)
    if "submitit" in target:
        raise RlexpError("Slurm submission runs through Hydra's multirun: add -m (one job per override combination)")
    return False, None


def prepare_in_job(cfg: DictConfig) -> str:
    """Cluster-side setup before training; returns how JAX was initialised."""
    if not in_cluster_job():
        return "local"
    from rlexp.launch.distributed import initialize

    how = initialize()  # SIGTERM -> checkpoint is the trainer's (rlexp.train.hooks)
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and os.environ.get("SLURM_PROCID", "0") == "0":
        write_slurm_record()
    return how


def write_slurm_record() -> None:
    """launcher.json in the job's output dir: which Slurm job ran it."""
    import json
    from pathlib import Path

    from hydra.core.hydra_config import HydraConfig

    job_id = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID", "?")
    if os.environ.get("SLURM_ARRAY_TASK_ID"):
        job_id = f"{job_id}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    out = Path(HydraConfig.get().runtime.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "launcher.json").write_text(json.dumps({"launcher": "slurm", "handle": job_id}, indent=1))
