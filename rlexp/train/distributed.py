"""In-job setup on a cluster, before training: Pathways or `jax.distributed` initialisation, launcher.json.

GKE pods get their roles from env vars the manifest sets (RLEXP_PATHWAYS, JAX_COORDINATOR_ADDRESS, ...);
Slurm jobs from SLURM_* variables (one JAX process per node, coordinator on the first node). SIGTERM
(preemption) is handled by the trainer (rlexp.train.hooks): checkpoint, then exit; resume=auto continues.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)
SLURM_COORDINATOR_PORT = 12355
IN_CLUSTER_ENV = "RLEXP_IN_CLUSTER"  # set by the JobSet manifest: `python -m rlexp` in the pod trains, not launch again


def in_cluster_job() -> bool:
    """Inside a GKE pod or a Slurm job (submitit) that rlexp launched."""
    return bool(os.environ.get(IN_CLUSTER_ENV)) or "SUBMITIT_EXECUTOR" in os.environ


@dataclass(frozen=True)
class DistributedArgs:
    coordinator_address: str
    num_processes: int
    process_id: int


def expand_hostlist(nodelist: str) -> list[str]:
    """Expand Slurm's compressed node list (`gpu[01-03,07],cpu5`) into host names."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", nodelist):
        m = re.fullmatch(r"(.*?)\[([^\]]*)\](.*)", part)
        if not m:
            hosts.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{str(i).zfill(len(lo))}{suffix}")
    return hosts


def slurm_args(env: dict[str, str]) -> DistributedArgs | None:
    """jax.distributed arguments from a Slurm job's environment; None for a single-process job."""
    ntasks = int(env.get("SLURM_NTASKS", env.get("SLURM_NPROCS", "1")))
    if "SLURM_JOB_ID" not in env or ntasks <= 1:
        return None
    first = expand_hostlist(env.get("SLURM_JOB_NODELIST") or env["SLURM_NODELIST"])[0]
    port = int(env.get("RLEXP_COORDINATOR_PORT", SLURM_COORDINATOR_PORT))
    return DistributedArgs(f"{first}:{port}", ntasks, int(env["SLURM_PROCID"]))


def gke_args(env: dict[str, str]) -> DistributedArgs | None:
    """jax.distributed arguments of a multi-controller GKE pod (set by the JobSet manifest)."""
    if "JAX_COORDINATOR_ADDRESS" not in env or int(env.get("JAX_PROCESS_COUNT", "1")) <= 1:
        return None
    port = env.get("JAX_COORDINATOR_PORT", "8476")
    return DistributedArgs(
        f"{env['JAX_COORDINATOR_ADDRESS']}:{port}", int(env["JAX_PROCESS_COUNT"]), int(env["JAX_PROCESS_ID"])
    )


def initialize(env: dict[str, str] | None = None) -> str:
    """Initialise the JAX runtime for this job; returns what was done (pathways | distributed | local)."""
    env = dict(os.environ if env is None else env)
    if env.get("RLEXP_PATHWAYS") == "1":
        import pathwaysutils  # in the TPU image (rlexp[tpu])

        pathwaysutils.initialize()
        return "pathways"
    args = gke_args(env) if env.get("RLEXP_IN_CLUSTER") == "gke" else slurm_args(env)
    if args is None:
        return "local"
    import jax

    jax.distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)
    return "distributed"


def prepare_in_job() -> str:
    """Cluster-side setup before training; returns how JAX was initialised."""
    if not in_cluster_job():
        return "local"
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
