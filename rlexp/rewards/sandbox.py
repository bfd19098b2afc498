"""Run user code outside the training process: under bubblewrap, with resource limits and a wall timeout.

One reward call (a batch of completions) is one sandbox process: the job goes in as JSON on stdin, the
values come back as JSON on stdout (`rlexp.rewards.sandbox_worker` is the program inside). Isolation:

  bwrap    read-only root, a private tmpfs /tmp (the only writable place, `tmp_mb` big), new network,
           pid, ipc and uts namespaces (no network at all), a clean environment (no HF_TOKEN, *_KEY,
           *_TOKEN, ...), $HOME, the working directory and the run dir hidden under empty tmpfs; inside,
           root becomes nobody and RLIMIT_AS (`memory_mb`), RLIMIT_CPU (`cpu_s`), RLIMIT_NPROC (`nproc`,
           against fork bombs) and RLIMIT_FSIZE (`fsize_mb`) are set before user code runs
  process  a plain child process with the same limits, clean environment and a fresh temporary working
           directory, but the files and the network of the host: the opt-out (`sandbox: none`) where
           bubblewrap is missing
  user     a child process with the user's environment and working directory (reward=python's default,
           whose functions import the user's modules)

The wall timeout (`timeout_s`) is enforced from outside: the process group is killed. Every sandbox process
dies with its parent (rlexp.children: the worker and the items it forks; bubblewrap's `--die-with-parent`), so
Ctrl-C, SIGTERM or SIGKILL of rlexp leaves none running. A failed call (crash,
timeout, limit, unreadable answer) is retried once; then `SandboxError` is raised and the reward scores
the call's items NaN, which `rlexp.rewards.compose` counts as errored values (`non_finite`, against
`reward.max_error_ratio`): each such sample leaves its group (`rlexp.rewards.compose.leave_group`).
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlexp.children import prelude
from rlexp.errors import ConfigError, RlexpError

WORKER_SOURCE = (Path(__file__).parent / "sandbox_worker.py").read_text()
MODES = ("bwrap", "process", "user")
_MAX_ANSWER = 16 << 20  # bytes of stdout kept; a flood beyond is an unreadable answer
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
    """Runs jobs of `rlexp.rewards.sandbox_worker` in `mode` (bwrap, process or user) under `limits`."""

    def __init__(self, mode: str, limits: Limits, hide: list[str] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"sandbox mode {mode!r}: use one of {MODES}")
        self.mode, self.limits = mode, limits
        self.hide = hidden_paths(hide) if mode == "bwrap" else []
        self.calls = {"calls": 0, "retries": 0, "failed_calls": 0}

    def _argv_env(self) -> tuple[list[str], dict[str, str] | None, str | None]:
        if self.mode == "bwrap":
            return bwrap_argv(shutil.which("bwrap") or "bwrap", self.limits, self.hide), {}, None
        if self.mode == "process":
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tempfile.gettempdir(), "LANG": "C.UTF-8"}
            return [interpreter(), "-I", "-c", prelude(os.getpid()) + WORKER_SOURCE], env, None
        return [sys.executable, "-c", prelude(os.getpid()) + WORKER_SOURCE], None, os.getcwd()

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
            "drop_root": self.mode == "bwrap",
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
        argv, env, cwd = self._argv_env()
        tmp = None
        if self.mode == "process":
            tmp = tempfile.TemporaryDirectory(prefix="rlexp-reward-")
            cwd = tmp.name
        try:
            return self._communicate(argv, env, cwd, payload)
        finally:
            if tmp is not None:
                tmp.cleanup()

    def _communicate(self, argv: list[str], env: Any, cwd: Any, payload: bytes) -> tuple[dict | None, str]:
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, cwd=cwd, start_new_session=True,
            )  # fmt: skip
        except OSError as err:
            return None, f"cannot start {argv[0]}: {err}"

        def feed() -> None:
            try:
                proc.stdin.write(payload)  # type: ignore[union-attr]
                proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass

        threading.Thread(target=feed, daemon=True).start()
        out, err, timed_out = bytearray(), bytearray(), False
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, out)  # type: ignore[arg-type]
            sel.register(proc.stderr, selectors.EVENT_READ, err)  # type: ignore[arg-type]
            while sel.get_map():
                left = self.limits.timeout_s - (time.monotonic() - start)
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                    elif len(key.data) < _MAX_ANSWER:
                        key.data.extend(chunk)
        if timed_out:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        rc = proc.wait()
        for f in (proc.stdout, proc.stderr):
            f.close()  # type: ignore[union-attr]
        if timed_out:
            return None, f"timed out after {self.limits.timeout_s:g}s (reward kwargs.timeout_s)"
        if rc != 0 or not out:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {rc}"]
            if rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):  # bwrap exits 128 + the signal of its child
                tail = [f"CPU limit of {self.limits.cpu_s or self.limits.timeout_s:g}s exceeded"]
            return None, f"the sandbox process ended without an answer: {tail[0][:300]}"
        try:
            answer = json.loads(bytes(out))
        except ValueError:
            return None, "the sandbox answered something that is not JSON"
        if not isinstance(answer, dict) or not ("error" in answer or isinstance(answer.get("values"), list)):
            return None, "the sandbox answered JSON of the wrong shape"
        return answer, ""

    def close(self) -> None:
        """Nothing is kept between calls; here for RewardSet.close()."""
