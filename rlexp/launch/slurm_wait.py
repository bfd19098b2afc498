"""Waiting for a sweep's Slurm jobs: `decide` (what one look at a job means, a pure function) and `wait`, the
polling loop around it that asks squeue, reads the result files and acts on each decision.

The submitting side waits through `squeue`, not through submitit's `sacct` poll, which fails (three warning
lines a poll) on clusters without accounting, and whose answer for a requeued job would end the wait early. A
job's result is its task 0's result file; a job that Slurm ended without one (a killed process, scancel, a node
failure) failed, with the last error line of its logs as the reason. A job stopped by SIGTERM (preemption,
`scontrol requeue`) leaves no result (rlexp.train.run) and is waited on until its rerun resumes and completes.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from rlexp.errors import RunError
from rlexp.launch.slurm_jobs import SlurmJob, job_return
from rlexp.launch.slurm_logs import last_error_line
from rlexp.launch.slurm_queue import ACTIVE, REQUEUED, cancel, queue_states

log = logging.getLogger(__name__)
# After Slurm reports a job ended, how long its result file may take to appear (shared file systems lag).
RESULT_GRACE_S = 15.0
# A job Slurm ended in a state other than COMPLETED (or forgot) shows no result this long after: it failed.
FAILED_GRACE_S = 2.0
# Past this long after a job's result appeared, its tasks or a silent squeue are not waited for.
LATE_S = 10.0
POLL_S = 1.0  # result files are read every second
MAX_QUERY_S = 10.0  # squeue is asked 1, 2, 4 ... s after submission, then every 10 s


class Verdict(enum.Enum):
    WAIT = "wait"  # nothing to do yet
    ASK_AGAIN = "ask again"  # keep waiting, and ask squeue again right away
    DONE = "done"  # the result is the job's outcome
    REQUEUED = "requeued"  # done, but Slurm requeued the job after its run ended: cancel the rerun
    FAILED = "failed"  # Slurm ended the job (or forgot it) and no result came


@dataclass(frozen=True)
class Look:
    """What is known of one job at one moment of the wait (times in seconds of one monotonic clock)."""

    state: str  # squeue's state for the job, "" when squeue does not list it (or never answered)
    has_result: bool  # task 0's result file is there and readable
    all_results: bool  # every task's result file is there
    answered: bool  # squeue has answered at least once during the wait
    answered_at: float  # when squeue last answered (-inf: never)
    elapsed: float  # since the wait began
    now: float
    ended_at: float | None  # when the job's result, or its end without one, was first seen (None: not yet)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    ended_at: float | None  # the job's `ended_at` from now on


def decide(look: Look) -> Decision:
    """What to do about one job, from squeue's state, its result files and the time since things were seen."""
    state = look.state
    if look.has_result:
        # Wait until Slurm ends the job too (its tasks exit right after their results), so that what the sweep
        # reports and what squeue says agree; a task still running LATE_S after its peers' results is not waited
        # for.
        ended_at = look.now if look.ended_at is None else look.ended_at
        late = look.now - ended_at > LATE_S
        # A state squeue gave before the result appeared is stale: a job that ended within a second of starting
        # still read PENDING, and was taken for a requeue and cancelled (its error then read `tasks 0-1:
        # Terminated`). Ask again; past LATE_S (squeue silent) take the result as is.
        stale = look.answered_at < ended_at
        if stale and not late:
            return Decision(Verdict.ASK_AGAIN, ended_at)
        if state not in ("RUNNING", "COMPLETING") or (look.all_results and late):
            # a requeue (preemption) that came after the run ended: the rerun would redo nothing
            requeued = state in REQUEUED and not stale
            return Decision(Verdict.REQUEUED if requeued else Verdict.DONE, ended_at)
        return Decision(Verdict.ASK_AGAIN, ended_at)
    # Slurm ended it, or forgot it (squeue keeps ended jobs for MinJobAge), and no result came
    ended = (bool(state) and state not in ACTIVE) or (look.answered and not state and look.elapsed > RESULT_GRACE_S)
    if not ended:
        return Decision(Verdict.WAIT, None)
    ended_at = look.now if look.ended_at is None else look.ended_at
    grace = RESULT_GRACE_S if state in ("COMPLETED", "") else FAILED_GRACE_S
    return Decision(Verdict.FAILED if look.now - ended_at >= grace else Verdict.WAIT, ended_at)


def query_due(since_query: float, elapsed: float) -> bool:
    """Whether squeue is asked now: 1, 2, 4 ... s after the wait began, then every MAX_QUERY_S."""
    return since_query >= min(MAX_QUERY_S, max(1.0, elapsed / 2))


def shown_state(state: str, reason: str) -> str:
    """The state as the wait prints it: a pending job's reason with it."""
    return f"{state} ({reason})" if state == "PENDING" and reason not in ("", "None") else state


def failure(handle: str, state: str, log_line: str | None) -> tuple[str, str]:
    """(why, the job's error) for a job Slurm ended without a result; `log_line` is its logs' error line."""
    why = log_line or f"ended {state or 'unknown to squeue'} without a result"
    return why, f"Slurm job {handle} {state.lower() if state else 'gone'}: {why}"


def read_result(job: SlurmJob) -> Any | None:
    """Task 0's result (Hydra's JobReturn), once its file is there."""
    from submitit.core.utils import pickle_load

    path = job.submitted.task(0).paths.result_pickle
    if not path.exists():
        return None
    try:
        outcome, value = pickle_load(path)
    except EOFError:  # being written
        return None
    if outcome == "success":
        return value
    lines = [ln for ln in str(value).splitlines() if ln.strip()]
    return job_return(job, "FAILED", RunError(f"Slurm job {job.handle}: {lines[-1] if lines else 'failed'}"))


def _all_results(job: SlurmJob) -> bool:
    return all(job.submitted.task(t).paths.result_pickle.exists() for t in range(job.submitted.num_tasks))


def wait(jobs: list[SlurmJob]) -> None:
    """Until every job has a result or Slurm ended it without one; state changes are printed as they happen."""
    start = time.monotonic()
    last_query = answered_at = -math.inf
    states: dict[str, tuple[str, str]] = {}
    answered = warned = False
    while True:
        open_jobs = [j for j in jobs if j.outcome is None]
        if not open_jobs:
            return
        elapsed = time.monotonic() - start
        if query_due(time.monotonic() - last_query, elapsed):
            answer = queue_states(j.handle for j in open_jobs)
            last_query = time.monotonic()
            if answer is not None:
                states, answered, answered_at = answer, True, last_query
            elif not warned:
                log.warning("squeue did not answer; waiting on the jobs' result files meanwhile")
                warned = True
        for job in open_jobs:
            state, reason = states.get(job.handle, ("", ""))
            shown = shown_state(state, reason)
            if shown and shown != job.seen:
                job.seen = shown
                print(f"rlexp: job {job.num} (Slurm {job.handle}): {shown}", flush=True)
            result = read_result(job)
            look = Look(
                state=state,
                has_result=result is not None,
                all_results=result is not None and _all_results(job),
                answered=answered,
                answered_at=answered_at,
                elapsed=elapsed,
                now=time.monotonic(),
                ended_at=job.ended_at,
            )
            decision = decide(look)
            job.ended_at = decision.ended_at
            if decision.verdict is Verdict.ASK_AGAIN:
                last_query = -math.inf
            elif decision.verdict in (Verdict.DONE, Verdict.REQUEUED):
                job.outcome = result
                if decision.verdict is Verdict.REQUEUED:
                    cancel([job.handle])
                    print(f"rlexp: job {job.num} (Slurm {job.handle}): ended before its requeue; rerun cancelled")
            elif decision.verdict is Verdict.FAILED:
                why, error = failure(job.handle, state, last_error_line(job.logs))
                job.outcome = job_return(job, "FAILED", RunError(error))
                print(f"rlexp: job {job.num} (Slurm {job.handle}): failed: {why}", flush=True)
        time.sleep(POLL_S)
