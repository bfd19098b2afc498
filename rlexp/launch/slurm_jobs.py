"""Slurm job records: the submitting side's `SlurmJob`, the `launcher.json` in each job's dir, and what
`python -m rlexp.jobs` shows of them (status rows, the log, cancel).

`rlexp.jobs` takes Slurm's word while Slurm knows a job (`scontrol show job`), and the job's own files
(summary.json, launcher.json) once Slurm has forgotten it (MinJobAge).
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rlexp.errors import RlexpError, RunError
from rlexp.launch.slurm_logs import last_error_line
from rlexp.launch.slurm_queue import ACTIVE, cancel, first_line, job_info, queue_states


# ---- the submitting side ------------------------------------------------------------------------------------
@dataclass
class SlurmJob:
    """One job of the sweep on its way through Slurm."""

    num: int
    overrides: list[str]
    out_dir: Path
    task_name: str
    submitted: Any = None  # submitit's Job
    handle: str = ""
    outcome: Any = None  # Hydra's JobReturn once known
    seen: str = ""
    ended_at: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def logs(self) -> list[str]:
        """Log files of every task, task 0's first (srun's own messages land in task 0's error log)."""
        out = []
        for t in range(self.submitted.num_tasks):
            paths = self.submitted.task(t).paths
            out += [str(paths.stderr), str(paths.stdout)]
        return out


def job_return(job: SlurmJob, status: str, value: Any) -> Any:
    """Hydra's JobReturn for the job, with `status` (a JobStatus name) and its return value."""
    from hydra.core.utils import JobReturn, JobStatus

    ret = JobReturn(
        overrides=list(job.overrides), working_dir=str(job.out_dir), task_name=job.task_name, status=JobStatus[status]
    )
    ret.return_value = value
    return ret


def write_record(job: SlurmJob, **fields: Any) -> None:
    """launcher.json in the job's dir (the job adds its nodes and task count when it starts)."""
    path = job.out_dir / "launcher.json"
    record: dict = {}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(old, dict) and old.get("handle") == job.handle:
            record = old
    except (OSError, ValueError):
        pass
    record.update(fields)
    job.out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


def read_record(job: SlurmJob) -> dict:
    """The job dir's launcher.json when the Slurm launcher wrote it (it names a job id), else {}."""
    try:
        rec = json.loads((job.out_dir / "launcher.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) and rec.get("launcher") == "slurm" and rec.get("handle") else {}


# ---- rlexp.jobs ---------------------------------------------------------------------------------------------
@dataclass
class Record:
    job: str  # the job's dir relative to the given dir ("." for one job), or the Slurm job id given
    handle: str
    path: Path | None = None  # its launcher.json
    data: dict = field(default_factory=dict)


HANDLE = re.compile(r"\d+(_\d+)?")
HEADER = ("JOB", "SLURM JOB", "STATE", "RESTARTS", "AGE", "ERROR")


def find_records(target: str) -> list[Record] | None:
    """Slurm jobs of a run or sweep dir (launcher.json files), or the Slurm job id given; None: not Slurm's."""
    root = Path(target)
    if not root.exists():
        return [Record(target, target)] if HANDLE.fullmatch(target) else None
    paths = [root / "launcher.json"] if (root / "launcher.json").exists() else sorted(root.glob("**/launcher.json"))
    out = []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # the GKE reader reports unreadable records
        if isinstance(data, dict) and data.get("launcher") == "slurm" and isinstance(data.get("handle"), str):
            rel = str(path.parent.relative_to(root)) if path.parent != root else "."
            out.append(Record(rel, data["handle"], path, data))
    out.sort(key=lambda r: (len(r.job), r.job))
    return out or None


def _age(stamp: str | None, now: float) -> str:
    if not stamp or stamp in ("Unknown", "None", "N/A"):
        return "-"
    try:
        t = datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return "-"
    s = max(0, int(now - t))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def rlexp_state(slurm_state: str) -> str:
    """pending | running | completed | failed | cancelled, from a Slurm job state."""
    if slurm_state in ("RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING"):
        return "running"
    if slurm_state in ACTIVE:
        return "pending"
    if slurm_state == "COMPLETED":
        return "completed"
    return "cancelled" if slurm_state == "CANCELLED" else "failed"


def _summary_state(rec: Record) -> str | None:
    if rec.path is None:
        return None
    run_dir = Path(rec.data.get("output_dir") or rec.path.parent)
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return "completed" if summary.get("status") == "completed" else "failed"


def status_rows(records: list[Record]) -> list[tuple[str, ...]]:
    """JOB, SLURM JOB, STATE, RESTARTS, AGE, ERROR: Slurm's word while it knows the job, else the job's files."""
    info = job_info(r.handle for r in records)
    now = time.time()
    rows = []
    for rec in records:
        fields = info.get(rec.handle)
        error = ""
        if fields is not None:
            slurm_state = fields.get("JobState", "?")
            state = rlexp_state(slurm_state)
            restarts, age = fields.get("Restarts", "0"), _age(fields.get("SubmitTime"), now)
            summary = _summary_state(rec)
            if state in ("failed", "cancelled") and summary == "completed":
                state = "completed"  # the run completed; Slurm ended a rerun a late requeue started
            elif state == "completed" and "failed" in (rec.data.get("state"), summary):
                state = "failed"  # Slurm's job ended normally, its run did not (an error the job reported)
            if state == "pending" and fields.get("Reason") not in (None, "None"):
                slurm_state = f"{slurm_state} ({fields['Reason']})"
        else:  # Slurm forgot it (MinJobAge): what the job and the submitting side wrote
            state = _summary_state(rec) or rec.data.get("state") or "unknown"
            restarts, age = "-", _age(rec.data.get("submitted"), now)
        if state in ("failed", "cancelled"):
            logs = list(rec.data.get("logs") or []) or ([fields["StdErr"]] if fields and fields.get("StdErr") else [])
            error = rec.data.get("error") or last_error_line(logs) or (fields or {}).get("Reason", "")
        rows.append((rec.job, rec.handle, state, restarts, age, error))
    return rows


def log_path(rec: Record) -> Path:
    """Task 0's error log: where rlexp writes its progress, summary and errors (and srun its messages)."""
    logs = list(rec.data.get("logs") or [])
    if logs:
        return Path(logs[0])
    fields = job_info([rec.handle]).get(rec.handle)
    if not fields or not fields.get("StdErr"):
        raise RlexpError(f"Slurm job {rec.handle}: unknown to scontrol and no launcher.json names its logs")
    return Path(fields["StdErr"])


def stream_log(rec: Record, follow: bool) -> None:
    """Print the job's log; with `follow`, keep printing until Slurm no longer runs the job."""
    path = log_path(rec)
    pos = 0
    while True:
        if path.exists():
            with path.open("rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
        if not follow:
            return
        state = (queue_states([rec.handle]) or {}).get(rec.handle, ("", ""))[0]
        if state not in ACTIVE:
            follow = False  # one more read for what was written last
            continue
        time.sleep(1.0)


def cancel_jobs(records: list[Record]) -> list[str]:
    """scancel every job of the records that Slurm still runs or queues; one line per job."""
    info = job_info(r.handle for r in records)
    live = [r.handle for r in records if (info.get(r.handle) or {}).get("JobState", "") in ACTIVE]
    if live:
        done = cancel(live)
        if done.returncode != 0:
            raise RunError(f"scancel {' '.join(live)}: {first_line(done.stderr)}")
    ended = {r.handle: (info.get(r.handle) or {}).get("JobState", "").lower() or "unknown to Slurm" for r in records}
    return [f"{h}: cancelled" if h in live else f"{h}: not running ({ended[h]})" for h in (r.handle for r in records)]
