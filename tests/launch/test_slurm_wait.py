"""Waiting for Slurm jobs without a cluster: the decision on each look at a job (a table of what squeue, the
result files and the clock say), the polling schedule, and the loop around them with a stand-in squeue."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rlexp.launch.slurm_wait import Look, Verdict, decide, failure, query_due, shown_state

NEVER = -math.inf
NOW = 100.0


def look(state: str = "", *, result: bool = False, every: bool = False, answered_at: float = 99.0, **kw: Any) -> Look:
    """One look at a job at NOW, 100 s into the wait; squeue last answered a second ago unless told."""
    fields = dict(
        state=state,
        has_result=result,
        all_results=every,
        answered=answered_at != NEVER,
        answered_at=answered_at,
        elapsed=100.0,
        now=NOW,
        ended_at=None,
    )
    return Look(**(fields | kw))


# (what is seen, the verdict, the job's ended_at afterwards)
CASES = {
    # no result yet
    "pending: wait": (look("PENDING"), Verdict.WAIT, None),
    "running: wait, and forget an earlier end": (look("RUNNING", ended_at=90.0), Verdict.WAIT, None),
    "requeued (preempted, no result): wait for the rerun": (look("REQUEUED", ended_at=90.0), Verdict.WAIT, None),
    "failed state first seen: wait for a lagging result": (look("FAILED"), Verdict.WAIT, NOW),
    "failed state 1.9 s ago: still waiting": (look("FAILED", ended_at=98.1), Verdict.WAIT, 98.1),
    "failed state 2 s ago: failed": (look("FAILED", ended_at=98.0), Verdict.FAILED, 98.0),
    "node failure 5 s ago: failed": (look("NODE_FAIL", ended_at=95.0), Verdict.FAILED, 95.0),
    "completed 14 s ago without a result: wait (slow file system)": (
        look("COMPLETED", ended_at=86.0),
        Verdict.WAIT,
        86.0,
    ),
    "completed 15 s ago without a result: failed": (look("COMPLETED", ended_at=85.0), Verdict.FAILED, 85.0),
    "gone from squeue: wait first": (look(""), Verdict.WAIT, NOW),
    "gone from squeue 15 s ago: failed": (look("", ended_at=85.0), Verdict.FAILED, 85.0),
    "not listed yet, 10 s after submission: wait": (look("", elapsed=10.0), Verdict.WAIT, None),
    "squeue never answered: wait on the result files": (
        look("", answered_at=NEVER, ended_at=None),
        Verdict.WAIT,
        None,
    ),
    # a result
    "result, squeue says completed: done": (look("COMPLETED", result=True, ended_at=98.0), Verdict.DONE, 98.0),
    "result first seen, squeue forgot the job": (look("", result=True, answered_at=NOW), Verdict.DONE, NOW),
    "result newer than squeue's answer: ask again": (
        look("PENDING", result=True, answered_at=97.0, ended_at=98.0),
        Verdict.ASK_AGAIN,
        98.0,
    ),
    "requeued after the result: done, cancel the rerun": (
        look("PENDING", result=True, answered_at=99.0, ended_at=98.0),
        Verdict.REQUEUED,
        98.0,
    ),
    "requeued state, squeue silent past 10 s: done, no cancel": (
        look("REQUEUED", result=True, answered_at=80.0, ended_at=89.0),
        Verdict.DONE,
        89.0,
    ),
    "result, tasks still running: ask again": (
        look("RUNNING", result=True, every=True, ended_at=95.0),
        Verdict.ASK_AGAIN,
        95.0,
    ),
    "result, completing: ask again": (look("COMPLETING", result=True, ended_at=98.0), Verdict.ASK_AGAIN, 98.0),
    "every task's result, still running 10+ s later: done": (
        look("RUNNING", result=True, every=True, ended_at=89.0),
        Verdict.DONE,
        89.0,
    ),
    "task 0's result only, another task still running: ask again": (
        look("RUNNING", result=True, every=False, ended_at=50.0),
        Verdict.ASK_AGAIN,
        50.0,
    ),
}


@pytest.mark.parametrize(("seen", "verdict", "ended_at"), list(CASES.values()), ids=list(CASES))
def test_what_a_look_at_a_job_decides(seen: Look, verdict: Verdict, ended_at: float | None) -> None:
    decision = decide(seen)
    assert (decision.verdict, decision.ended_at) == (verdict, ended_at)


@pytest.mark.parametrize(
    ("since_query", "elapsed", "due"),
    [
        (math.inf, 0.0, True),  # never asked
        (0.5, 0.5, False),
        (1.0, 1.0, True),  # at least a second apart
        (1.5, 4.0, False),  # half the time waited so far
        (2.0, 4.0, True),
        (9.9, 100.0, False),
        (10.0, 100.0, True),  # at most 10 s apart
    ],
)
def test_squeue_is_asked_ever_less_often(since_query: float, elapsed: float, due: bool) -> None:
    assert query_due(since_query, elapsed) is due


@pytest.mark.parametrize(
    ("state", "reason", "shown"),
    [
        ("PENDING", "Priority", "PENDING (Priority)"),
        ("PENDING", "None", "PENDING"),
        ("PENDING", "", "PENDING"),
        ("RUNNING", "None", "RUNNING"),
        ("", "", ""),
    ],
)
def test_the_state_line_names_why_a_job_waits(state: str, reason: str, shown: str) -> None:
    assert shown_state(state, reason) == shown


@pytest.mark.parametrize(
    ("state", "log_line", "why", "error"),
    [
        ("FAILED", "srun: error: vm: task 1: Killed", "srun: error: vm: task 1: Killed", "Slurm job 9_0 failed: "),
        ("TIMEOUT", None, "ended TIMEOUT without a result", "Slurm job 9_0 timeout: "),
        ("", None, "ended unknown to squeue without a result", "Slurm job 9_0 gone: "),
    ],
)
def test_a_failure_names_the_log_line_or_slurm_s_state(state: str, log_line: str | None, why: str, error: str) -> None:
    assert failure("9_0", state, log_line) == (why, error + why)


class _Task:
    def __init__(self, folder, t: int) -> None:  # type: ignore[no-untyped-def]
        from types import SimpleNamespace

        self.paths = SimpleNamespace(result_pickle=folder / f"{t}_result.pkl", stderr=folder / f"{t}.err")


class _Submitted:
    """What rlexp reads of submitit's Job: its tasks' result files."""

    num_tasks = 2

    def __init__(self, folder) -> None:  # type: ignore[no-untyped-def]
        self.folder = folder

    def task(self, t: int) -> _Task:
        return _Task(self.folder, t)

    def finish(self) -> None:
        import pickle

        for t in range(self.num_tasks):
            self.task(t).paths.result_pickle.write_bytes(pickle.dumps(("success", f"result of task {t}")))


@pytest.mark.slow
@pytest.mark.parametrize("requeued_after_the_run", [False, True])
def test_a_result_is_not_judged_by_a_state_squeue_gave_before_it(
    tmp_path, monkeypatch, requeued_after_the_run: bool
) -> None:  # type: ignore[no-untyped-def]
    """A job that ends within a second of starting was still PENDING at the last squeue; that answer predates its
    result and must not read as a requeue (rlexp cancelled such a job, and its error became `tasks 0-1:
    Terminated`). A requeue that squeue reports after the result does cancel the rerun."""
    from rlexp.launch import slurm_wait
    from rlexp.launch.slurm_jobs import SlurmJob

    submitted = _Submitted(tmp_path)
    job = SlurmJob(0, [], tmp_path, "t", submitted=submitted, handle="9_0")
    answers = []

    def queue_states(handles):  # type: ignore[no-untyped-def]
        # the job starts and ends right after squeue's first answer; later answers see it ended (or requeued)
        answers.append("PENDING" if not answers or requeued_after_the_run else "COMPLETED")
        if len(answers) == 1:
            submitted.finish()
        return {"9_0": (answers[-1], "None")}

    cancelled = []
    monkeypatch.setattr(slurm_wait, "queue_states", queue_states)
    monkeypatch.setattr(slurm_wait, "cancel", lambda handles: cancelled.extend(handles))
    slurm_wait.wait([job])
    assert job.outcome == "result of task 0"
    assert len(answers) == 2  # squeue was asked again once the result was there
    assert cancelled == (["9_0"] if requeued_after_the_run else [])
