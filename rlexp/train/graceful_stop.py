"""SIGTERM or a first Ctrl-C while training: checkpoint after this step, then stop. A second Ctrl-C: stop at once.

Python runs a signal's handler in the main thread, between bytecodes, and keeps one "pending" flag per signal.
While the main thread is inside a long C call (a jitted step, a device-to-host copy, an orbax wait), two Ctrl-C
become one handler call, run only when the call returns: the second press was lost and the run went on to save
its checkpoint. So every signal is also counted where it arrives: `signal.set_wakeup_fd` writes one byte per
delivered signal to a pipe, and a thread reading it acts on the second SIGINT at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)


class GracefulStop:
    """SIGTERM / first Ctrl-C set a flag that the step hook turns into checkpoint + exit.

    In a Slurm job that submitit started, its time-limit warning (`--signal=USR2@120`, the signal named by
    SUBMITIT_PREEMPT_SIGNAL) does the same; the job then requeues itself (rlexp.train.run) and resumes.
    """

    def __init__(self, signals: tuple[signal.Signals, ...] | None = None, run_dir: str | None = None) -> None:
        self.run_dir = run_dir  # the session's (process 0 only): a second Ctrl-C cleans its unfinished checkpoint
        self.requested: str | None = None  # the first signal this process received while training
        self.late: str | None = None  # a signal received after training ended (peers stopped first)
        self.stopped: str | None = None  # why training stopped early when a signal stopped it, on any process
        self.signals = signals if signals is not None else stop_signals()
        self._old: dict[int, Any] = {}
        self._stopping = threading.Lock()  # held by whichever of the counter's thread and the handler stops first
        self._counter: _SignalCounter | None = None

    def __enter__(self) -> GracefulStop:
        for sig in self.signals:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. inside a launcher worker): no handler
                pass
        if signal.SIGINT in self._old:
            self._counter = _SignalCounter.start(on_second_sigint=self._stop_now)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            # a second Ctrl-C: the counter's thread usually stops first; this covers one pressed as training ends,
            # after the counter stopped and before the handlers are put back
            self._stop_now()
        self.requested = self.requested or signal.Signals(signum).name
        from rlexp import train

        train.stop_signal[:] = [self.requested]
        log.warning("\n%s received; saving a checkpoint after this step", signal.Signals(signum).name)

    def _stop_now(self) -> None:
        """A second Ctrl-C ends the process now, in one line: a KeyboardInterrupt raised wherever the main thread
        is (a GC callback, an orbax wait) was a traceback, or swallowed. The newest whole checkpoint stays; the
        unfinished one's temp folder is removed. Runs once: a second caller waits here until the process is gone."""
        self._stopping.acquire()
        from rlexp.errors import RunError, print_error

        if self.run_dir is not None:
            from rlexp.train.write_failure import clean_temp

            clean_temp(self.run_dir, settle_s=0.5)
        print_error(
            RunError(
                f"{self.run_dir or 'the run'}: interrupted twice (Ctrl-C), stopped at once; rerun the same command to resume from its newest checkpoint"
            )
        )
        os._exit(130)

    def __exit__(self, *exc: Any) -> None:
        import jax

        if self._counter is not None:
            self._counter.stop()
        for sig, old in self._old.items():
            if sig != signal.SIGINT and jax.process_count() > 1:
                # A peer may have ended training before this process's own SIGTERM arrives; dying
                # of it now, before jax.distributed's shutdown barrier, would make the peers abort
                # there after the heartbeat timeout. The run's files are written: finish normally.
                signal.signal(sig, self._after_training)
                continue
            signal.signal(sig, old)

    def _after_training(self, signum: int, frame: Any) -> None:
        self.late = self.late or signal.Signals(signum).name
        log.warning("\n%s received after training; finishing", signal.Signals(signum).name)


class _SignalCounter:
    """Counts the SIGINTs delivered to the process (one byte each on the wakeup pipe) in a daemon thread."""

    def __init__(self, read_fd: int, write_fd: int, old_wakeup_fd: int, on_second_sigint: Any) -> None:
        self.read_fd, self.write_fd, self.old_wakeup_fd = read_fd, write_fd, old_wakeup_fd
        self.on_second_sigint = on_second_sigint
        self.thread = threading.Thread(target=self._count, name="rlexp-sigint-counter", daemon=True)

    @classmethod
    def start(cls, on_second_sigint: Any) -> _SignalCounter:
        """From the main thread (as `signal.signal` before it)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # the C-level handler must never block on a full pipe
        old = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        counter = cls(read_fd, write_fd, old, on_second_sigint)
        counter.thread.start()
        return counter

    def _count(self) -> None:
        sigints = 0
        while chunk := os.read(self.read_fd, 64):  # b"" once `stop` closed the write end
            if self.old_wakeup_fd >= 0:  # whoever set a wakeup fd before (an asyncio loop) still hears of it
                with contextlib.suppress(OSError):
                    os.write(self.old_wakeup_fd, chunk)
            sigints += chunk.count(bytes([signal.SIGINT]))
            if sigints >= 2:
                self.on_second_sigint()
        os.close(self.read_fd)

    def stop(self) -> None:
        signal.set_wakeup_fd(self.old_wakeup_fd)  # the handler writes to ours no more (main thread, as `start`)
        os.close(self.write_fd)
        self.thread.join(timeout=5)


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGTERM and SIGINT; in a submitit Slurm job also its time-limit signal (USR2 unless
    SUBMITIT_PREEMPT_SIGNAL says otherwise), which submitit itself would answer by exiting mid-step."""
    out = (signal.SIGTERM, signal.SIGINT)
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm":
        extra = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), None)
        if isinstance(extra, signal.Signals) and extra not in out:
            out = (*out, extra)
    return out
