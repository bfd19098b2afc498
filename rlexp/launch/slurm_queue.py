"""The Slurm queue client: the calls to squeue, scontrol and scancel, what their answers mean, and the job states.

Every Slurm command rlexp runs goes through `run_command`, which turns a missing command into one line naming the
fix and a command that hangs into a failed answer.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Sequence

from rlexp.errors import RlexpError

# States in which Slurm still holds the job: it may run (again) and write its result.
ACTIVE = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "SPECIAL_EXIT",
    "RESV_DEL_HOLD",
}
# Slurm holds the job for another run (after a requeue or preemption), not running it now.
REQUEUED = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT"}
LOCAL_FIX = "on this machine, scripts/local_slurm.sh up starts a one-node Slurm"


def run_command(args: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """One Slurm command's answer; exit status 124 when it did not answer within `timeout`."""
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise RlexpError(
            f"hydra/launcher=slurm: {args[0]} not found on PATH; run from a Slurm login node, install the Slurm "
            f"client (Debian: apt-get install slurm-client); {LOCAL_FIX}"
        ) from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(args), 124, "", f"{args[0]}: no answer within {timeout:.0f} s")


def first_line(text: str) -> str:
    """The first non-blank line of a command's output, for one-line errors."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else "no output"


def slurm_conf() -> str:
    """The slurm.conf the Slurm commands read here."""
    return os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"


def queue_states(handles: Iterable[str]) -> dict[str, tuple[str, str]] | None:
    """{handle: (state, reason)} for the jobs Slurm still knows (squeue keeps ended jobs for MinJobAge);
    None when squeue could not answer (the caller keeps waiting)."""
    ids = sorted({h.split("_")[0] for h in handles})
    if not ids:
        return {}
    done = run_command(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(ids)])
    if done.returncode != 0:
        return {} if "Invalid job id" in done.stderr else None
    return parse_squeue(done.stdout)


def parse_squeue(text: str) -> dict[str, tuple[str, str]]:
    """squeue's `%i|%T|%r` lines -> {handle: (state, reason)}."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3:
            out[parts[0]] = (parts[1], parts[2])
    return out


def array_tasks(spec: str) -> list[str]:
    """`0-3,7%2` (a pending array's task ids, with its throttle) -> ["0", "1", "2", "3", "7"]."""
    out: list[str] = []
    for part in spec.split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out += [str(i) for i in range(int(lo), int(hi or lo) + 1)]
    return out


def job_info(handles: Iterable[str]) -> dict[str, dict[str, str]]:
    """`scontrol show job` fields (JobState, Reason, Restarts, SubmitTime, StdErr, ...) by handle, for the jobs
    Slurm still knows; one call per job id (an array's tasks come together, its pending ones in one record)."""
    out: dict[str, dict[str, str]] = {}
    for jid in sorted({h.split("_")[0] for h in handles}):
        done = run_command(["scontrol", "show", "job", "-o", jid])
        if done.returncode != 0:
            continue
        out.update(parse_show_job(done.stdout))
    return out


def parse_show_job(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show job -o` lines -> {handle: fields}; an array's pending tasks share one record."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\S+?)=(\S*)", line))
        if "JobId" not in fields:
            continue
        tasks = fields.get("ArrayTaskId", "")
        if not tasks or tasks == "N/A":
            out[fields["JobId"]] = fields
        for task in array_tasks(tasks):
            out[f"{fields.get('ArrayJobId')}_{task}"] = fields
    return out


def cancel(handles: Iterable[str]) -> subprocess.CompletedProcess[str]:
    """scancel the jobs (array tasks by `<job>_<task>`)."""
    return run_command(["scancel", *handles])
