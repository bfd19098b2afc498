"""The warm sandbox worker: one process for the run that serves jobs, each in a FRESH FORKED CHILD of it.

Its text follows `sandbox_worker`'s in `python -I -c <text> <settings JSON>`. It reads frames (8-byte big-endian
length, then JSON) on stdin and writes one answer frame per job on stdout. The worker never runs user code: each
job runs in a child forked for it (the call), which closes the worker's pipes (it can neither read the next job
nor forge an answer), points stdin/stdout/stderr at /dev/null, sets the call's limits and runs the job; its
answer comes back through a pipe of its own. So no module state, global, patched builtin, environment change or
thread carries from one call to the next. After each call the worker kills whatever the call left running (it is
the child subreaper: a daemon or a grandchild becomes its child; inside bubblewrap's pid namespace `kill(-1)`
reaches all of them), empties the sandbox's /tmp (the only writable place) and removes System V IPC objects
(POSIX message queues are refused by RLIMIT_MSGQUEUE 0); when that fails the frame says `clean: false` and rlexp
retires this worker for a fresh one. The worker is not dumpable: a call's code (the same user) can neither
ptrace it nor open its pipes through /proc. Mode `process` gives each call a fresh temporary working folder.

Settings: {"mode": "bwrap" | "process" | "user", "drop_root": bool}: when root (bubblewrap without a user
namespace) the worker becomes nobody before serving, so RLIMIT_NPROC binds and /tmp is nobody's.
Answer frame: {"answer": <run(job)'s answer, or an error>, "clean": bool}.
"""

import json
import os
import select
import shutil
import signal
import struct
import sys
import tempfile
import time

if "run" not in globals():  # imported as a module (tests), not run after sandbox_worker's text
    from rlexp.rewards.sandbox_worker import _err, _limits, _where, die_with_parent, run

_HEAD = struct.Struct(">Q")
_MAX_ANSWER = 16 << 20  # bytes of a call's answer; beyond, it is unreadable
_LIBC = None


def _drop_root():
    """Root inside the sandbox becomes nobody: RLIMIT_NPROC binds only a non-root user."""
    if os.getuid() != 0:
        return
    try:
        os.chown("/tmp", 65534, 65534)
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    except OSError:
        pass  # root of a user namespace cannot map nobody; the pid namespace and the wall timeout still bind


def _prctl(option, value):
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, min(n - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return data


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _the_call(job, settings, cwd):
    """In the call's child: limits, then the job (its answer)."""
    if cwd:
        os.chdir(cwd)
    _limits(job.get("limits") or {}, settings.get("mode") != "user")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past RLIMIT_FSIZE fails instead of killing
    try:
        return run(job)
    except BaseException as exc:  # noqa: BLE001
        return {"error": _err(exc) + _where(exc), "fatal": False}


def _collect(fd, pid):
    """The call child's answer bytes (until EOF, or until it exited and its pipe is drained) and its status."""
    out = bytearray()
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    exited, status = False, None
    while True:
        watch = [fd] if pidfd is None or exited else [fd, pidfd]
        ready, _, _ = select.select(watch, [], [], None if pidfd is not None and not exited else 0.05)
        if fd in ready:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            if len(out) <= _MAX_ANSWER:
                out += chunk
            continue
        if exited:
            break  # exited, pipe drained (something it left holds the pipe open)
        if pidfd is None:
            done, code = os.waitpid(pid, os.WNOHANG)
            status = code if done else None
        if (pidfd is not None and pidfd in ready) or status is not None:
            exited = True
            os.set_blocking(fd, False)
    if pidfd is not None:
        os.close(pidfd)
    os.close(fd)
    if status is None:
        _, status = os.waitpid(pid, 0)
    return bytes(out), status


def _answer(data, status, lim):
    if data and len(data) <= _MAX_ANSWER:
        try:
            answer = json.loads(data)
            if isinstance(answer, dict):
                return answer
        except ValueError:
            pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        why = f"CPU limit of {lim.get('cpu_s'):g}s exceeded" if sig == signal.SIGXCPU else f"killed by signal {sig}"
    elif data:
        why = "its answer is not readable JSON"
    else:
        why = f"exit status {os.WEXITSTATUS(status)}"
    return {"error": f"the sandbox process ended without an answer: {why}", "fatal": False}


def _sweep(in_namespace, rounds=2000):
    """Kill and reap every process the call left (this worker is their subreaper); False when some stay."""
    for _ in range(rounds):
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return True  # none left
        if in_namespace:
            try:
                os.kill(-1, signal.SIGKILL)  # all of bubblewrap's pid namespace but its init and this worker
            except OSError:
                pass
        else:
            me = str(os.getpid())
            for pid in os.listdir("/proc"):
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        if pid.isdigit() and f.read().rpartition(")")[2].split()[1] == me:
                            os.kill(int(pid), signal.SIGKILL)
                except (OSError, IndexError):
                    pass
        time.sleep(0.001)
    return False


def _wipe(top):
    """Empty `top` (the sandbox's /tmp) and restore its mode; False when something stays."""
    try:
        os.chmod(top, 0o1777)
        if not os.listdir(top):
            return True
        for root, dirs, _ in os.walk(top, onerror=lambda e: None):
            for d in dirs:  # a folder the call made unreadable still goes
                try:
                    os.chmod(os.path.join(root, d), 0o700, follow_symlinks=False)
                except OSError:
                    pass
        for name in os.listdir(top):
            path = os.path.join(top, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        return not os.listdir(top)
    except (OSError, RecursionError):
        return False


def _ipc_clean():
    """Remove the System V IPC objects a call made: bubblewrap's ipc namespace lives as long as the worker."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    libc, ok = _LIBC, True
    for kind, rm in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                ids = [int(line.split()[1]) for line in f.read().splitlines()[1:] if line.strip()]
        except OSError:
            continue
        for i in ids:
            ok = rm(i, 0, None) == 0 and ok  # 0: IPC_RMID
    return ok


def _call(job, settings, keep):
    """One job in a fresh forked child; the worker's answer frame {"answer", "clean"}."""
    worker, lim, mode = os.getpid(), job.get("limits") or {}, settings.get("mode")
    cwd = tempfile.mkdtemp(prefix="rlexp-reward-") if mode == "process" else None  # a fresh folder per call
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(r)
        os.close(w)
        return {"answer": {"error": "cannot fork: " + _err(exc), "fatal": False}, "clean": True}
    if pid == 0:
        try:
            os.close(r)
            for fd in keep:  # the worker's pipes: a call can neither read the next job nor forge an answer
                os.close(fd)
            os.setpgid(0, 0)
            die_with_parent(worker)
            _write_all(w, json.dumps(_the_call(job, settings, cwd)).encode())
        finally:
            os._exit(0)
    os.close(w)
    data, status = _collect(r, pid)
    clean = _sweep(mode == "bwrap")
    if mode == "bwrap":
        clean = _wipe("/tmp") and _ipc_clean() and clean
    if cwd:
        shutil.rmtree(cwd, ignore_errors=True)
    return {"answer": _answer(data, status, lim), "clean": clean}


def serve(settings):
    """Answer job frames on stdin until it closes."""
    jobs, answers = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    if settings.get("drop_root"):
        _drop_root()
        die_with_parent()  # a change of user clears the parent-death signal: set it again
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: a call (same user) cannot ptrace this worker or open its pipes in /proc
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: what a call leaves running becomes this worker's child, to sweep
    while True:
        head = _read_exact(jobs, _HEAD.size)
        if head is None:
            os._exit(0)
        body = _read_exact(jobs, _HEAD.unpack(head)[0])
        if body is None:
            os._exit(0)
        try:
            frame = _call(json.loads(body), settings, (jobs, answers))
        except BaseException as exc:  # noqa: BLE001 - the worker's own failure: this worker is retired
            frame = {"answer": {"error": "the sandbox worker failed: " + _err(exc), "fatal": False}, "clean": False}
        data = json.dumps(frame).encode()
        _write_all(answers, _HEAD.pack(len(data)) + data)


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
