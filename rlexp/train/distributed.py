"""In-job setup on a cluster, before training: Pathways or `jax.distributed` initialisation, launcher.json.

GKE pods get their roles from env vars the manifest sets (RLEXP_PATHWAYS, JAX_COORDINATOR_ADDRESS, ...);
Slurm tasks from SLURM_* variables: every task of the job step is one JAX process, the coordinator listens on
the step's first node, on a port of its own per job. A step is started by submitit (`hydra/launcher=slurm`) or
by hand (`srun -n 2 python -m rlexp slice=cpu-2x1 ...` inside an allocation). SIGTERM (preemption, requeue) is
handled by the trainer (rlexp.train.hooks): checkpoint, then exit; resume=auto continues.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)
# Slurm: the coordinator's port is this + job id % 1000 (RLEXP_COORDINATOR_PORT fixes it), so two jobs that
# share a node do not collide; JAX's own default (GKE pods, one job per VM) is the manifest's.
SLURM_COORDINATOR_PORT = 12355
IN_CLUSTER_ENV = "RLEXP_IN_CLUSTER"  # set by the JobSet manifest: `python -m rlexp` in the pod trains, not launch again


def in_slurm_step(env: Mapping[str, str] | None = None) -> bool:
    """A task of a Slurm job step with several tasks (srun); not the batch script itself, which has no step id."""
    env = os.environ if env is None else env
    tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or "1"
    return "SLURM_STEP_ID" in env and "SLURM_JOB_ID" in env and int(tasks) > 1


def in_cluster_job(env: Mapping[str, str] | None = None) -> bool:
    """Inside a GKE pod or a Slurm job that rlexp launched, or a task of a multi-task `srun` step."""
    env = os.environ if env is None else env
    return bool(env.get(IN_CLUSTER_ENV)) or "SUBMITIT_EXECUTOR" in env or in_slurm_step(env)


def in_submitit_slurm_job(env: Mapping[str, str] | None = None) -> bool:
    """A task of a Slurm job that `hydra/launcher=slurm` submitted (submitit runs the Hydra job in it)."""
    env = os.environ if env is None else env
    return env.get("SUBMITIT_EXECUTOR") == "slurm" and "SLURM_JOB_ID" in env


def primary_task(env: Mapping[str, str] | None = None) -> bool:
    """The task that writes a job's bookkeeping (sweep.json, launcher.json): Slurm rank 0 or JAX process 0.

    Known from the environment before JAX starts; every task of a multi-process job runs the same Hydra job.
    """
    env = os.environ if env is None else env
    if env.get(IN_CLUSTER_ENV) == "gke":
        return env.get("JAX_PROCESS_ID", "0") == "0"
    return env.get("SLURM_PROCID", "0") == "0"


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


def slurm_coordinator_port(env: Mapping[str, str]) -> int:
    """RLEXP_COORDINATOR_PORT, else one port per job: jobs sharing a node (arrays, small slices) do not collide."""
    if env.get("RLEXP_COORDINATOR_PORT"):
        return int(env["RLEXP_COORDINATOR_PORT"])
    return SLURM_COORDINATOR_PORT + int(env.get("SLURM_JOB_ID", "0")) % 1000


def slurm_args(env: Mapping[str, str]) -> DistributedArgs | None:
    """jax.distributed arguments of a Slurm task; None for a single-process step or outside a step.

    The step's own node list and task count come first (SLURM_STEP_*): a step may use part of the allocation.
    Task 0 runs on the step's first node (block distribution, Slurm's default), so the coordinator lives there.
    """
    if not in_slurm_step(env):
        return None
    ntasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or "1")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env["SLURM_NODELIST"]
    first = expand_hostlist(nodelist)[0]
    return DistributedArgs(f"{first}:{slurm_coordinator_port(env)}", ntasks, int(env["SLURM_PROCID"]))


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
    if "SLURM_JOB_ID" in os.environ and os.environ.get(IN_CLUSTER_ENV) != "gke" and primary_task():
        write_slurm_record()
    return how


def slurm_job_handle(env: Mapping[str, str] | None = None) -> str:
    """The job's name for squeue/scontrol/scancel: `<array job>_<task>` in an array (submitit's sweeps), else the id."""
    env = os.environ if env is None else env
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID", "?")


def write_slurm_record() -> None:
    """launcher.json in the job's output dir: which Slurm job ran it, on which nodes, with how many tasks.

    The submitting side wrote the record first (job id, log files); fields it knows and the job does not are kept.
    """
    import json
    from pathlib import Path

    from hydra.core.hydra_config import HydraConfig

    env = os.environ
    handle = slurm_job_handle()
    out = Path(HydraConfig.get().runtime.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "launcher.json"
    record: dict = {}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(old, dict) and old.get("launcher") == "slurm" and old.get("handle") == handle:
            record = old
    except (OSError, ValueError):
        pass  # none yet (a job started by hand), or unreadable: write a fresh one
    record.update(
        {
            "launcher": "slurm",
            "handle": handle,
            "nodes": env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST"),
            "tasks": int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or "1"),
        }
    )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)  # the submitting side reads it while the job runs
