"""Following what rlexp's launchers submitted: status, logs and cancel (the commands of `python -m rlexp.jobs`).

Jobs are found through the `launcher.json` each job's output dir holds: a JobSet (name, namespace, kube context)
from the GKE launcher, or a Slurm job (job id, log files) from `hydra/launcher=slurm`
(rlexp.launch.slurm_jobs).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rlexp.errors import RlexpError, RunError
from rlexp.launch import slurm_jobs


@dataclass
class Handle:
    job: str  # the job's dir relative to the given dir ("." for a single run), or the name given
    name: str
    namespace: str
    context: str | None
    submitted: bool = True  # False: written by a dry run, never sent to a cluster


def find_handles(target: str, namespace: str = "default", context: str | None = None) -> list[Handle]:
    """JobSets of a run or sweep dir (from launcher.json files), or the one JobSet named."""
    root = Path(target)
    if not root.exists():
        if "/" in target or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", target):
            raise RlexpError(f"target={target}: no such run or sweep dir, and not a JobSet name; check the path")
        return [Handle(target, target, namespace, context)]
    records = [root / "launcher.json"] if (root / "launcher.json").exists() else sorted(root.glob("**/launcher.json"))
    handles = []
    for path in records:
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise RunError(
                f"{path}: not a launcher record ({str(err).splitlines()[0][:120]}); restore it, or give the JobSet name"
            ) from None
        if not isinstance(rec, dict) or rec.get("launcher") != "gke":
            continue
        if not isinstance(rec.get("handle"), str):
            raise RunError(f"{path}: no JobSet name in its 'handle'; restore it, or give the JobSet name")
        rel = str(path.parent.relative_to(root)) if path.parent != root else "."
        submitted = rec.get("state") != "dry-run"
        handles.append(
            Handle(rel, rec["handle"], rec.get("namespace", namespace), context or rec.get("context"), submitted)
        )
    if not handles:
        raise RlexpError(
            f"{target}: no launcher.json from the GKE or Slurm launcher below it; give a run/sweep dir, a JobSet "
            "name or a Slurm job id"
        )
    handles.sort(key=lambda h: (len(h.job), h.job))
    return handles


def _age(created: str | None, now: float) -> str:
    if not created:
        return "-"
    t = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    s = max(0, int(now - t))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def status_rows(handles: list[Handle]) -> list[tuple[str, str, str, str, str]]:
    from rlexp.launch.k8s import connect, jobset_state

    clusters: dict[str | None, object] = {}
    rows = []
    now = time.time()
    for h in handles:
        if not h.submitted:
            rows.append((h.job, h.name, "DryRun", "-", "-"))
            continue
        if h.context not in clusters:
            clusters[h.context] = connect(h.context)
        obj = clusters[h.context].get_jobset(h.name, h.namespace)  # type: ignore[attr-defined]
        state = jobset_state(obj)
        restarts = str((obj or {}).get("status", {}).get("restarts", 0)) if obj else "-"
        age = _age((obj or {}).get("metadata", {}).get("creationTimestamp"), now) if obj else "-"
        rows.append((h.job, h.name, state, restarts, age))
    return rows


def format_table(
    rows: list[tuple[str, ...]], header: tuple[str, ...] = ("JOB", "JOBSET", "STATE", "RESTARTS", "AGE")
) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    )


def cmd_status(a: argparse.Namespace) -> int:
    records = slurm_jobs.find_records(a.target)
    if records is not None:
        print(format_table(slurm_jobs.status_rows(records), slurm_jobs.HEADER))
        return 0
    print(format_table(status_rows(find_handles(a.target, a.namespace, a.context))))
    return 0


def cmd_logs(a: argparse.Namespace) -> int:
    from rlexp.launch.k8s import connect

    records = slurm_jobs.find_records(a.target)
    if records is not None:
        if len(records) != 1:
            raise RlexpError(f"{a.target} holds {len(records)} jobs; give one job dir or Slurm job id")
        slurm_jobs.stream_log(records[0], follow=not a.no_follow)
        return 0
    handles = find_handles(a.target, a.namespace, a.context)
    if len(handles) != 1:
        raise RlexpError(f"{a.target} holds {len(handles)} jobs; give one job dir or JobSet name")
    h = handles[0]
    if not h.submitted:  # no cluster has it: asking one would only report a kubeconfig problem
        raise RlexpError(
            f"{a.target}: JobSet {h.name} is a dry run (launcher.json state dry-run), never submitted, so no pod has "
            "logs; its manifest is jobset.yaml there; submit it by running the same command without "
            "hydra.launcher.dry_run=true"
        )
    cluster = connect(h.context)
    pod = cluster.head_pod(h.name, h.namespace)
    if pod is None:
        raise RlexpError(f"JobSet {h.name} has no pod with an rlexp container yet (pending?); try again later")
    for chunk in cluster.stream_logs(pod, h.namespace, follow=not a.no_follow):
        sys.stdout.write(chunk.decode(errors="replace"))
        sys.stdout.flush()
    return 0


def cmd_cancel(a: argparse.Namespace) -> int:
    from rlexp.launch.k8s import connect

    records = slurm_jobs.find_records(a.target)
    if records is not None:
        for line in slurm_jobs.cancel_jobs(records):
            print(line)
        return 0
    clusters: dict[str | None, object] = {}
    for h in find_handles(a.target, a.namespace, a.context):
        if not h.submitted:
            print(f"{h.name}: a dry run, never submitted")
            continue
        if h.context not in clusters:
            clusters[h.context] = connect(h.context)
        cluster = clusters[h.context]
        deleted = cluster.delete_jobset(h.name, h.namespace)  # type: ignore[attr-defined]
        print(f"{h.name}: {'cancelled' if deleted else 'not found (finished and cleaned up, or never submitted)'}")
    return 0
