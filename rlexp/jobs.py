"""`python -m rlexp.jobs`: follow what the GKE and Slurm launchers submitted.

python -m rlexp.jobs status <sweep or run dir>     table: job, JobSet or Slurm job, state, restarts, age (error)
python -m rlexp.jobs logs <JobSet name | Slurm job id | job dir>   the head pod's rlexp container / task 0's log
python -m rlexp.jobs cancel <JobSet name | Slurm job id | job or sweep dir>
"""

from __future__ import annotations

import sys

from rlexp import cli
from rlexp.errors import ArgumentParser


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(
        prog="python -m rlexp.jobs", description="Follow the JobSets and Slurm jobs rlexp's launchers submitted."
    )
    ap.add_argument(
        "--context", default=None, help="kube context (default: the one recorded at submission, else current)"
    )
    ap.add_argument("--namespace", default="default", help="namespace for bare JobSet names")
    sub = ap.add_subparsers(dest="cmd", metavar="command", required=True)
    sub.add_parser("status", help="table of a run's or sweep's JobSets or Slurm jobs").add_argument("target")
    logs = sub.add_parser("logs", help="stream the rlexp container of the head pod, or a Slurm job's log")
    logs.add_argument("target")
    logs.add_argument("--no-follow", action="store_true")
    sub.add_parser(
        "cancel", help="delete the JobSet(s) or cancel the Slurm job(s) of a job, run or sweep"
    ).add_argument("target")
    a = ap.parse_args(argv)
    from rlexp.launch import jobs

    return cli.command(lambda: {"status": jobs.cmd_status, "logs": jobs.cmd_logs, "cancel": jobs.cmd_cancel}[a.cmd](a))


if __name__ == "__main__":
    sys.exit(main())
