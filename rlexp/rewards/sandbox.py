"""Run user code outside the training process: under bubblewrap, with resource limits and a wall timeout.

A sandbox keeps WARM WORKERS for the run (`rlexp.rewards.sandbox_serve` after `sandbox_worker`): a reward call
(a batch of completions) goes in as a JSON frame, its values come back as one, and the worker runs it in a
fresh forked child of its own, so bubblewrap and an interpreter start once, not per call, while nothing of one
call (module state, globals, patched builtins, environment, files in /tmp, threads, processes, IPC objects)
reaches the next. Up to `Limits.workers` workers run, started when calls overlap (each call has one to itself),
so concurrent calls (a reward on several threads, the python tool of several rollouts) run side by side; a call's
items already run `parallel` at a time. Isolation:

  bwrap    read-only root, a private tmpfs /tmp (the only writable place, `tmp_mb` big, emptied after each
           call), new network, pid, ipc and uts namespaces (no network at all), a clean environment (no
           HF_TOKEN, *_KEY, *_TOKEN, ...), $HOME, the working directory and the run dir hidden under empty
           read-only tmpfs; inside, root becomes nobody and, per call, RLIMIT_AS (`memory_mb`), RLIMIT_CPU
           (`cpu_s`), RLIMIT_NPROC (`nproc`, against fork bombs) and RLIMIT_FSIZE (`fsize_mb`) are set before
           user code runs
  process  a plain child process with the same limits, clean environment and a fresh temporary working
           directory per call, but the files and the network of the host: the opt-out (`sandbox: none`) where
           bubblewrap is missing
  user     a child process with the user's environment and working directory (reward=python's default,
           whose functions import the user's modules)

The wall timeout (`timeout_s`) is enforced from outside, per call: the worker's process group is killed and the
next call gets a fresh worker (as does the call after one whose leftovers the worker could not clear). Every
sandbox process dies with its parent (rlexp.children: the worker, its calls and the items they fork;
bubblewrap's `--die-with-parent`; the workers are started from one long-lived thread, since the parent-death
signal follows the starting thread), so Ctrl-C, SIGTERM or SIGKILL of rlexp leaves none running; `close()`
stops them at the end of a run. A failed call (crash, timeout, limit, unreadable answer) is retried once; then
`SandboxError` is raised and the reward scores the call's items NaN, which `rlexp.rewards.compose` counts as
errored values (`non_finite`, against `reward.max_error_ratio`): each such sample leaves its group
(`rlexp.rewards.compose.leave_group`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlexp.children import prelude
from rlexp.errors import ConfigError, RlexpError
from rlexp.rewards.sandbox_pool import Worker, stop_all

# the jobs, then the warm worker's loop: one `python -I -c` text (the sandbox hides the working tree)
WORKER_SOURCE = "\n\n".join((Path(__file__).parent / f).read_text() for f in ("sandbox_worker.py", "sandbox_serve.py"))
MODES = ("bwrap", "process", "user")
_NOBODY = 65534


class SandboxError(RlexpError):
    """A reward call failed twice in its sandbox (crash, timeout, limit, unreadable answer)."""

    exit_code = 1


@dataclass
class Limits:
    """Per call: wall `timeout_s`; per process: CPU seconds, address space, processes, file size."""

    timeout_s: float = 100.0
    cpu_s: float | None = None  # None: timeout_s
    memory_mb: int | None = 1024
    nproc: int | None = 64
    fsize_mb: int | None = 64
    tmp_mb: int = 256
    item_timeout_s: float = 10.0  # each item's forked child (reward=code, code_tests)
    parallel: int = field(default_factory=lambda: max(1, min(4, os.cpu_count() or 1)))
    workers: int = field(default_factory=lambda: max(1, min(4, os.cpu_count() or 1)))  # warm ones, at most

    def check(self, key: str) -> None:
        for name, value in asdict(self).items():
            if value is not None and (not isinstance(value, int | float) or value <= 0):
                raise ConfigError(f"{key}.{name}", value, "must be a positive number (or null for no limit)")


def interpreter() -> str:
    """The real Python binary (not a venv's symlink, which may lie in a hidden folder); stdlib only inside."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def hidden_paths(extra: list[str] | None = None) -> list[str]:
    """Folders covered by an empty tmpfs: $HOME, the working directory, the Hydra run dir, `extra`."""
    paths = [os.path.expanduser("~"), os.getcwd(), *(extra or [])]
    try:
        from hydra.core.hydra_config import HydraConfig

        paths.append(HydraConfig.get().runtime.output_dir)
    except Exception:  # noqa: BLE001 - not under a Hydra app
        pass
    out = []
    for p in paths:
        real = os.path.realpath(p)
        if real.startswith("/tmp/"):
            continue  # the sandbox's own empty /tmp hides it already (and a mount point there would stay)
        if os.path.isdir(real) and real not in ("/", "/tmp", "/usr", "/proc", "/dev") and real not in out:
            out.append(real)
    return sorted(out)


def bwrap_argv(bwrap: str, limits: Limits, hide: list[str]) -> list[str]:
    """The bubblewrap command line around `python -I -c <worker>`."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--perms", "1777", "--size", str(int(limits.tmp_mb) << 20), "--tmpfs", "/tmp"]
    python = interpreter()
    prefix = os.path.realpath(sys.base_prefix)
    for h in hide:
        argv += ["--tmpfs", h]
    top = [h for h in hide if python.startswith(h + "/")]
    if top:  # e.g. pyenv under $HOME: its install comes back read-only, the folders on the way readable
        parts = Path(prefix).relative_to(top[0]).parts
        for i in range(1, len(parts)):
            argv += ["--perms", "0755", "--dir", str(Path(top[0], *parts[:i]))]
        argv += ["--ro-bind", prefix, prefix]
    for h in hide:  # empty and read-only: the warm worker's /tmp stays the one place a call can write
        argv += ["--remount-ro", h]
    # no user namespace when root: nobody's RLIMIT_NPROC then binds (a namespace's root cannot become nobody)
    user = [] if os.geteuid() == 0 else ["--unshare-user"]
    argv += [*user, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--die-with-parent", "--new-session", "--clearenv", "--chdir", "/tmp"]
    for k, v in (("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", "/tmp"), ("LANG", "C.UTF-8")):
        argv += ["--setenv", k, v]
    # inside bubblewrap's pid namespace the worker's parent is bwrap's own init: no pid to check (0)
    return [*argv, "--", python, "-I", "-c", prelude(0) + WORKER_SOURCE]


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str) -> str | None:
    argv = bwrap_argv(bwrap, Limits(), [])
    argv = argv[: argv.index("--") + 1] + ["/bin/true"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{bwrap} failed to start: {err}"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return f"{bwrap} cannot create a sandbox here ({tail})"
    return None


def bwrap_problem() -> str | None:
    """None when bubblewrap is on PATH and works here; else what is wrong."""
    path = shutil.which("bwrap")
    if not path:
        return "bubblewrap (bwrap) is not on PATH"
    return _probe(path)


def require_bwrap(key: str, value: Any, opt_out: str) -> None:
    """ConfigError (one line) when user code would have to run unconfined; `opt_out` names the key that allows it."""
    problem = bwrap_problem()
    if problem:
        raise ConfigError(
            key,
            value,
            f"{problem}, so user code cannot be sandboxed; install bubblewrap (apt-get install bubblewrap, or "
            f"scripts/install_system_deps.sh) or set {opt_out} to run it without file and network isolation",
        )


def _user_nproc(limit: int) -> int:
    """RLIMIT_NPROC counts all of a user's processes: a non-root user gets `limit` more than it runs now."""
    if os.geteuid() == 0:
        return limit
    uid, n = os.geteuid(), 0
    for pid in os.listdir("/proc"):
        try:
            n += pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid
        except OSError:
            pass
    return limit + n


class Sandbox:
    """Runs jobs of `rlexp.rewards.sandbox_worker` in `mode` (bwrap, process or user) under `limits`, on warm
    workers kept for the run: up to `limits.workers` of them, started when calls overlap (each call has one to
    itself), each call in a fresh forked child of its worker. `close()` (also at exit, and when the sandbox is
    garbage-collected) stops them; each dies with rlexp anyway (rlexp.children)."""

    def __init__(self, mode: str, limits: Limits, hide: list[str] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"sandbox mode {mode!r}: use one of {MODES}")
        self.mode, self.limits = mode, limits
        self.hide = hidden_paths(hide) if mode == "bwrap" else []
        self.calls = {"calls": 0, "retries": 0, "failed_calls": 0}
        self._idle: list[Worker] = []
        self._live: set[Worker] = set()
        self._starting = 0
        self._cond = threading.Condition()
        self._finalizer = weakref.finalize(self, stop_all, self._live)

    def _argv_env(self) -> tuple[list[str], dict[str, str] | None, str | None]:
        settings = json.dumps({"mode": self.mode, "drop_root": self.mode == "bwrap"})
        if self.mode == "bwrap":
            return [*bwrap_argv(shutil.which("bwrap") or "bwrap", self.limits, self.hide), settings], {}, None
        if self.mode == "process":
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tempfile.gettempdir(), "LANG": "C.UTF-8"}
            return [interpreter(), "-I", "-c", prelude(os.getpid()) + WORKER_SOURCE, settings], env, None
        return [sys.executable, "-c", prelude(os.getpid()) + WORKER_SOURCE, settings], None, os.getcwd()

    def warm(self) -> None:
        """Start one worker now, so that its start overlaps what comes before the first call."""
        with self._cond:
            if self._live or self._starting:
                return
            self._starting += 1
        self._release(self._start())

    def workers(self) -> list[int]:
        """The pids of the running workers (bubblewrap's, under bwrap)."""
        return [w.proc.pid for w in list(self._live) if w.alive]

    def _start(self) -> Worker | None:
        try:
            w = Worker(*self._argv_env())
        except OSError:
            w = None
        with self._cond:
            self._starting -= 1
            if w is not None:
                self._live.add(w)
            self._cond.notify_all()
        return w

    def _acquire(self) -> Worker | None:
        """An idle worker, or a new one while fewer than `limits.workers` run; None when one cannot start."""
        with self._cond:
            while not self._idle and len(self._live) + self._starting >= max(1, int(self.limits.workers)):
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._starting += 1
        return self._start()

    def _release(self, w: Worker | None) -> None:
        with self._cond:
            if w is not None and w.alive and w in self._live:
                self._idle.append(w)
            elif w is not None:
                self._live.discard(w)
            self._cond.notify_all()

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """The worker's answer {"values", "errors"}; SandboxError after a failed call and its retry."""
        lim = self.limits
        limits = {
            "memory_mb": lim.memory_mb,
            "cpu_s": lim.cpu_s or lim.timeout_s,
            "nproc": _user_nproc(lim.nproc) if lim.nproc and self.mode != "user" else None,
            "fsize_mb": lim.fsize_mb,
            "item_timeout_s": lim.item_timeout_s,
            "parallel": lim.parallel,
        }
        payload = json.dumps({**job, "limits": limits}).encode()
        why = "no attempt"
        for attempt in range(2):
            self.calls["calls"] += 1
            if attempt:
                self.calls["retries"] += 1
            answer, why = self._once(payload)
            if answer is not None and "error" not in answer:
                return answer
            if answer is not None:
                why = answer["error"]
                if answer.get("fatal"):
                    break  # the snippet itself is broken: the same again would fail the same way
        self.calls["failed_calls"] += 1
        raise SandboxError(f"sandboxed reward call failed after {attempt + 1} attempt(s): {why}")

    def _once(self, payload: bytes) -> tuple[dict[str, Any] | None, str]:
        w = self._acquire()
        if w is None:
            return None, f"cannot start the sandbox ({self.mode})"
        frame: dict[str, Any] | None = None
        try:
            frame, why = w.call(payload, self.limits.timeout_s)
        finally:
            if w.alive and not (frame or {}).get("clean", False):
                w.stop()  # a call left something it could not clear: the next call gets a fresh worker
            self._release(w)
        if frame is None:
            return None, why
        answer = frame["answer"]
        if not ("error" in answer or isinstance(answer.get("values"), list)):
            return None, "the sandbox answered JSON of the wrong shape"
        return answer, ""

    def close(self) -> None:
        """Stop the warm workers (a later call starts fresh ones)."""
        with self._cond:
            self._idle.clear()
            stop_all(self._live)
