"""Whether the Slurm cluster can take a sweep's jobs, checked before anything is written into the sweep dir.

`check_cluster`: the Slurm commands on PATH, the controller answering `scontrol ping`, the partition known to
`sinfo` and large enough for the job; one line naming the setting and its fix when not. The sweep callback checks
first (`check_launcher`), the launcher again only for settings not checked yet (`check_cluster_once`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp.errors import ConfigError, RlexpError, RunError
from rlexp.launch.slurm_queue import LOCAL_FIX, first_line, run_command, slurm_conf

COMMANDS = ("sbatch", "squeue", "scontrol", "sinfo", "scancel")


@dataclass
class Partition:
    name: str
    default: bool
    available: str
    nodes: int = 0
    cpus: int = 0  # per node, the largest node
    gpus: int = 0  # per node, the largest node


def partitions() -> dict[str, Partition]:
    """The cluster's partitions from `sinfo` (one row per partition and node configuration)."""
    done = run_command(["sinfo", "-h", "-o", "%P|%a|%D|%c|%G"])
    if done.returncode != 0:
        raise RunError(f"Slurm: sinfo failed ({first_line(done.stderr)}); check SLURM_CONF={slurm_conf()}")
    return parse_sinfo(done.stdout)


def parse_sinfo(text: str) -> dict[str, Partition]:
    """sinfo's `%P|%a|%D|%c|%G` rows -> one Partition each (node counts summed, the largest node's CPUs/GPUs)."""
    out: dict[str, Partition] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5:
            continue
        raw, avail, nodes, cpus, gres = parts[:5]
        name = raw.rstrip("*")
        p = out.setdefault(name, Partition(name, raw.endswith("*"), avail))
        p.nodes += int(nodes) if nodes.isdigit() else 0
        p.cpus = max(p.cpus, int(re.sub(r"\D.*", "", cpus) or 0))
        gpus = [int(n) for n in re.findall(r"gpu(?::[^:,()]+)?:(\d+)", gres)]
        p.gpus = max([p.gpus, *gpus])
    return out


def check_cluster(params: Mapping[str, Any]) -> None:
    """One line naming the Slurm setting and its fix when the cluster cannot take the jobs.

    Runs when the launcher is set up: before the sweep callback writes sweep.json, so a refused sweep leaves
    its dir as it was. `params` are the launcher's (hydra.launcher.*).
    """
    limit = params.get("timeout_min")
    if limit is not None and not (isinstance(limit, int | float) and 0 < limit < 10**7):
        raise ConfigError("hydra.launcher.timeout_min", limit, "use the job's time limit in minutes, > 0")
    wanted = params.get("partition")
    if wanted is not None and not str(wanted).strip():  # '' would silently mean the cluster's default partition
        raise ConfigError(
            "hydra.launcher.partition", wanted, "name a partition (sinfo -s), or drop the key for the cluster's default"
        )
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise RlexpError(
            f"hydra/launcher=slurm: {', '.join(missing)} not found on PATH; run from a Slurm login node, install "
            f"the Slurm client (Debian: apt-get install slurm-client); {LOCAL_FIX}"
        )
    if os.environ.get("SLURM_CONF") and not Path(os.environ["SLURM_CONF"]).is_file():
        # the Slurm commands would retry reading it for a minute before failing
        raise RunError(
            f"SLURM_CONF={os.environ['SLURM_CONF']}: no such file; point it at your cluster's slurm.conf or unset it "
            f"({LOCAL_FIX})"
        )
    ping = run_command(["scontrol", "ping"], timeout=20)
    said = (ping.stdout + "\n" + ping.stderr).strip()
    if ping.returncode != 0 or " is UP" not in said:
        raise RunError(
            f"Slurm controller (SlurmctldHost in {slurm_conf()}): not answering (scontrol ping: {first_line(said)}); "
            f"start slurmctld, or point SLURM_CONF at your cluster's slurm.conf ({LOCAL_FIX})"
        )
    known = partitions()
    names = ", ".join(sorted(known)) or "none"
    if wanted:
        if wanted not in known:
            raise ConfigError(
                "hydra.launcher.partition", wanted, f"no such Slurm partition; use one of {names} (sinfo -s)"
            )
        part = known[wanted]
    else:
        default = [p for p in known.values() if p.default]
        if not default:
            raise ConfigError(
                "hydra.launcher.partition", None, f"the cluster has no default partition; name one of {names}"
            )
        part = default[0]
    key = f"hydra.launcher.partition={part.name}" if wanted else f"partition {part.name} (the default)"
    if part.available != "up":
        raise RunError(f"{key}: the partition is {part.available}; choose another one of {names}")
    nodes = int(params.get("nodes") or 1)
    tasks, per_task = int(params.get("tasks_per_node") or 1), int(params.get("cpus_per_task") or 1)
    gpus = int(params.get("gpus_per_node") or 0)
    fits = [  # (key, value, too big for the partition, what to do)
        (
            "hydra.launcher.nodes",
            nodes,
            nodes > part.nodes,
            f"the slice's {nodes} nodes do not fit: {key} has {part.nodes}; pick a smaller slice or another partition",
        ),
        (
            "hydra.launcher.tasks_per_node",
            tasks,
            bool(part.cpus) and tasks * per_task > part.cpus,
            f"{tasks} tasks x {per_task} CPUs need {tasks * per_task} CPUs a node; {key} has {part.cpus}",
        ),
        (
            "hydra.launcher.gpus_per_node",
            gpus,
            gpus > part.gpus,
            f"nodes of {key} have {part.gpus} GPU(s) (sinfo %G); pick a slice that fits or a GPU partition",
        ),
    ]
    for setting, value, too_big, fix in fits:
        if too_big:
            raise ConfigError(setting, value, fix)
    _checked.add(_settings_key(params))


def _settings_key(params: Mapping[str, Any]) -> str:
    keys = ("partition", "nodes", "tasks_per_node", "cpus_per_task", "gpus_per_node")
    return json.dumps({k: params.get(k) for k in keys}, default=str, sort_keys=True)


_checked: set[str] = set()  # settings already checked in this process (the sweep callback, then the launcher)


def is_slurm_launcher(target: str) -> bool:
    """Whether a `hydra.launcher._target_` is rlexp's Slurm launcher."""
    return target.endswith("rlexp_launchers.slurm_launcher.SlurmLauncher")


def check_launcher(config: Any) -> None:
    """`check_cluster` for a multirun whose launcher is `hydra/launcher=slurm` (the sweep callback's first step);
    nothing for other launchers."""
    from omegaconf import OmegaConf

    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    if is_slurm_launcher(target):
        from rlexp.errors import user_errors_from_resolvers

        with user_errors_from_resolvers():
            params = OmegaConf.to_container(config.hydra.launcher, resolve=True)
        check_cluster(params)  # type: ignore[arg-type]


def check_cluster_once(params: Mapping[str, Any]) -> None:
    """`check_cluster`, unless the same settings passed it already in this process."""
    if _settings_key(params) not in _checked:
        check_cluster(params)
