"""What a Slurm job's log files say about why it failed: rlexp's one-line error, srun's word on a task that
died, or the last line of a Python traceback. The logs hold every run of a requeued job."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ERROR_LINE_CHARS = 300
REQUEUE_LINE = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT \S+ DUE TO (JOB REQUEUE|PREEMPTION) \*\*\*")
TASK_DIED = re.compile(r"srun: error: \S+: tasks? [\d,-]+: (?!Exited with exit code 0\b)")


def _read(paths: Iterable[str | Path]) -> list[list[str]]:
    out = []
    for path in paths:
        try:
            out.append([line.strip() for line in Path(path).read_text(errors="replace").splitlines()])
        except OSError:
            continue
    return out


def task_death_line(paths: Iterable[str | Path]) -> str | None:
    """srun's line for the first task that died in the job's last run (`task 1: Killed`, `Aborted`, a non-zero
    exit): the cause when one process's death ends the others. The logs hold every run of a requeued job."""
    for lines in _read(paths):
        last_run = max((i for i, s in enumerate(lines) if REQUEUE_LINE.search(s)), default=-1)
        for s in lines[last_run + 1 :]:
            if TASK_DIED.match(s):
                return s[:ERROR_LINE_CHARS]
    return None


def last_error_line(paths: Iterable[str | Path]) -> str | None:
    """The line that says why a job failed, from its log files: rlexp's own one-line error first, then the
    first task srun saw die (or Slurm's last error line), then the last line of a Python traceback."""
    paths = list(paths)
    rlexp, slurm, python = [], [], []
    for lines in _read(paths):
        for s in lines:
            if s.startswith("rlexp: error:"):
                rlexp.append(s[len("rlexp: error:") :].strip())
            elif re.match(r"(srun|slurmstepd\S*|sbatch): error:", s):
                slurm.append(s)
            elif re.match(r"[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(: .*)?$", s):
                python.append(s)
    if rlexp:
        return rlexp[-1][:ERROR_LINE_CHARS]
    died = task_death_line(paths)
    if died or slurm:
        return died or slurm[-1][:ERROR_LINE_CHARS]
    return python[-1][:ERROR_LINE_CHARS] if python else None
