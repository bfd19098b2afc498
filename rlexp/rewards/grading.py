"""Grading answers with math-verify in worker processes, each call under a hard timeout.

math-verify (sympy underneath) can take minutes, or hang, on adversarial completions; its
own signal-based timeout only works in a main thread. So grading runs in a small pool of
processes started through a forkserver (no fork of a process that holds JAX threads):
each call gets `timeout_s`, a worker that overruns is terminated (SIGTERM, then SIGKILL)
and replaced, and its pair is reported as None, i.e. an errored invocation. Workers also
retire after `max_tasks` calls, since sympy caches grow. `close()` (also run at exit and when
the pool is garbage-collected) stops every worker; no process outlives the pool, nor rlexp (rlexp.children).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

DEFAULT_GRADER = "rlexp.rewards.grading:math_verify_equal"
# Graders built on math-verify: a worker imports and warms them before it reports ready, so the
# first graded pair does not pay the import inside its timeout.
MATH_VERIFY_GRADERS = (DEFAULT_GRADER, "rlexp.rewards.maxtext:math_verify_seed")
_STARTUP_TIMEOUT_S = 120.0


def math_verify_equal(predicted: str, gold: str) -> bool:
    """math-verify's verdict on two answers (each parsed as the content of a \\boxed{})."""
    from math_verify import parse, verify

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    pred_parsed = parse(f"\\boxed{{{predicted}}}", parsing_timeout=None)
    return bool(gold_parsed and pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=None))


def resolve(spec: str) -> Callable[..., Any]:
    """`package.module:function` -> the function."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{spec!r} is not of the form module:function")
    return getattr(importlib.import_module(module), name)


def _worker(conn: Any, grader: str) -> None:
    from rlexp.children import die_with_parent

    die_with_parent()  # its parent is the forkserver, which ends when rlexp does
    fn = resolve(grader)
    if grader in MATH_VERIFY_GRADERS:
        import logging

        # This process enforces the timeout itself; math-verify's "timeout disabled" warning is noise here.
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        fn("\\boxed{1}", "\\boxed{1}")  # import and warm math-verify before reporting ready
    conn.send(("ready", None))
    while True:
        task = conn.recv()
        if task is None:
            return
        predicted, gold = task
        try:
            conn.send(("ok", bool(fn(predicted, gold))))
        except Exception as err:  # noqa: BLE001 - a grader failure is reported, the worker lives on
            conn.send(("error", repr(err)))


class _Worker:
    def __init__(self, ctx: Any, grader: str) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, grader), daemon=True, name="rlexp-grader")
        self.proc.start()
        child.close()
        self.ready = False
        self.started = time.monotonic()
        self.task: int | None = None
        self.deadline = 0.0
        self.done = 0

    def stop(self, graceful: bool = True) -> None:
        if graceful and self.proc.is_alive():
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self.proc.join(1.0)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(1.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(1.0)
        self.conn.close()


def _shutdown(workers: list[_Worker]) -> None:
    for w in workers:
        w.stop()
    workers.clear()


class GraderPool:
    """`grade(pairs)` -> one True/False per (predicted, gold) pair, or None for a timeout or a crash."""

    def __init__(
        self, grader: str = DEFAULT_GRADER, processes: int = 2, timeout_s: float = 10.0, max_tasks: int = 200
    ) -> None:
        if processes < 1 or timeout_s <= 0:
            raise ValueError("GraderPool needs processes >= 1 and timeout_s > 0")
        self.grader, self.processes, self.timeout_s, self.max_tasks = grader, processes, timeout_s, max_tasks
        self._ctx = mp.get_context("forkserver")
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self.timeouts = 0  # calls that overran timeout_s (cumulative)
        self.failures = 0  # calls whose grader raised or whose worker died
        self._finalizer = weakref.finalize(self, _shutdown, self._workers)

    def alive(self) -> list[int]:
        """PIDs of the running workers."""
        return [w.proc.pid for w in self._workers if w.proc.is_alive()]

    def close(self) -> None:
        self._finalizer()

    def _replace(self, w: _Worker, graceful: bool) -> None:
        w.stop(graceful)
        self._workers[self._workers.index(w)] = _Worker(self._ctx, self.grader)

    def grade(self, pairs: list[tuple[str, str]]) -> list[bool | None]:
        if not pairs:
            return []
        with self._lock:
            if not self._finalizer.alive:
                raise RuntimeError("GraderPool is closed")
            while len(self._workers) < min(self.processes, len(pairs)):
                self._workers.append(_Worker(self._ctx, self.grader))
            return self._run(pairs)

    def _run(self, pairs: list[tuple[str, str]]) -> list[bool | None]:
        results: list[bool | None] = [None] * len(pairs)
        pending = deque(range(len(pairs)))
        while True:
            now = time.monotonic()
            for w in list(self._workers):
                if w.ready and w.task is None and pending:
                    w.task = pending.popleft()
                    w.deadline = now + self.timeout_s
                    w.conn.send(pairs[w.task])
            busy = [w for w in self._workers if w.task is not None or not w.ready]
            if not pending and all(w.task is None for w in self._workers):
                return results
            deadlines = [w.deadline if w.ready else w.started + _STARTUP_TIMEOUT_S for w in busy]
            ready = wait([w.conn for w in busy], timeout=max(0.0, min(deadlines) - time.monotonic()))
            for w in list(busy):
                if w.conn in ready:
                    try:
                        kind, value = w.conn.recv()
                    except (EOFError, OSError):  # the worker died (OOM, segfault in C code)
                        if not w.ready:
                            raise RuntimeError(f"grader worker ({self.grader}) exited while starting") from None
                        self.failures += 1
                        w.task = None
                        self._replace(w, graceful=False)
                        continue
                    if kind == "ready":
                        w.ready = True
                        continue
                    if kind == "ok":
                        results[w.task] = value  # type: ignore[index]
                    else:
                        self.failures += 1
                    w.task, w.done = None, w.done + 1
                    if w.done >= self.max_tasks:
                        self._replace(w, graceful=True)
                elif time.monotonic() >= (w.deadline if w.ready else w.started + _STARTUP_TIMEOUT_S):
                    if not w.ready:
                        raise RuntimeError(f"grader worker ({self.grader}) did not start in {_STARTUP_TIMEOUT_S:.0f}s")
                    self.timeouts += 1
                    w.task = None
                    self._replace(w, graceful=False)
