"""The parent's side of a warm sandbox worker (`rlexp.rewards.sandbox_serve`): start it, send a job frame, read
the answer frame under the call's wall timeout, kill it (its whole session) when it fails or overruns.

Workers are started from ONE long-lived thread: a child's parent-death signal (rlexp.children, bubblewrap's
`--die-with-parent`) fires when the THREAD that started it ends, and a warm worker must outlive the thread of the
call that needed it (a reward thread of a pool, say) yet die with rlexp.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import selectors
import signal
import struct
import subprocess
import threading
import time
from concurrent.futures import Future
from typing import Any

MAX_ANSWER = 16 << 20  # bytes of an answer frame kept; a flood beyond is an unreadable answer
HEAD = struct.Struct(">Q")  # a frame's length, then its JSON
_SPAWN_LOCK = threading.Lock()
_SPAWN_QUEUE: queue.SimpleQueue | None = None


def _spawner() -> queue.SimpleQueue:
    """The queue of the one long-lived thread that starts warm workers (started once, lives as long as rlexp)."""
    global _SPAWN_QUEUE
    with _SPAWN_LOCK:
        if _SPAWN_QUEUE is None:
            q: queue.SimpleQueue = queue.SimpleQueue()

            def serve() -> None:
                while True:
                    start, done = q.get()
                    try:
                        done.set_result(start())
                    except BaseException as err:  # noqa: BLE001 - handed to the caller
                        done.set_exception(err)

            threading.Thread(target=serve, daemon=True, name="rlexp-sandbox-spawner").start()
            _SPAWN_QUEUE = q
    return _SPAWN_QUEUE


def _spawn(argv: list[str], env: dict[str, str] | None, cwd: str | None) -> subprocess.Popen:
    """`subprocess.Popen` (pipes, its own session) run by the spawner thread."""
    done: Future = Future()
    start = functools.partial(
        subprocess.Popen, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env, cwd=cwd, start_new_session=True, bufsize=0,
    )  # fmt: skip
    _spawner().put((start, done))
    return done.result()


class Worker:
    """One warm worker (`sandbox_serve`): job frames in on stdin, answer frames out on stdout."""

    def __init__(self, argv: list[str], env: dict[str, str] | None, cwd: str | None) -> None:
        self.proc = _spawn(argv, env, cwd)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            os.set_blocking(f.fileno(), False)  # type: ignore[union-attr]
        self.alive = True

    def call(self, payload: bytes, timeout_s: float) -> tuple[dict[str, Any] | None, str]:
        """(the answer frame, "") or (None, why); a worker that failed is stopped and not `alive`."""
        frame = memoryview(HEAD.pack(len(payload)) + payload)
        out, err, start = bytearray(), bytearray(), time.monotonic()
        why, need = "", None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdin, selectors.EVENT_WRITE)  # type: ignore[arg-type]
            sel.register(self.proc.stdout, selectors.EVENT_READ, out)  # type: ignore[arg-type]
            sel.register(self.proc.stderr, selectors.EVENT_READ, err)  # type: ignore[arg-type]
            while need is None or len(out) < need:
                left = timeout_s - (time.monotonic() - start)
                if left <= 0:
                    why = f"timed out after {timeout_s:g}s (reward kwargs.timeout_s)"
                    break
                for key, _ in sel.select(left):
                    fd = key.fd
                    if key.fileobj is self.proc.stdin:
                        try:
                            frame = frame[os.write(fd, frame[:65536]) :]
                        except BlockingIOError:
                            continue
                        except OSError:
                            frame = frame[:0]
                        if not frame:
                            sel.unregister(key.fileobj)
                        continue
                    try:
                        chunk = os.read(fd, 1 << 20)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(key.fileobj)
                        if key.data is out:
                            why = "ended"
                    elif len(key.data) < MAX_ANSWER + HEAD.size:
                        key.data.extend(chunk)
                if need is None and len(out) >= HEAD.size:
                    need = HEAD.size + HEAD.unpack(out[: HEAD.size])[0]
                if why:
                    break
        if need is not None and len(out) >= need and not why:
            try:
                answer = json.loads(bytes(out[HEAD.size : need]))
            except ValueError:
                answer = None
            if isinstance(answer, dict) and isinstance(answer.get("answer"), dict):
                return answer, ""
            why = "the sandbox answered something that is not JSON of the right shape"
        rc = self.stop()
        if why == "ended":
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {rc}"]
            why = f"the sandbox process ended without an answer: {tail[0][:300]}"
        return None, why

    def stop(self) -> int:
        """Kill the worker and all it runs (its own session: bubblewrap, the calls, their leftovers)."""
        self.alive = False
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        rc = self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()  # type: ignore[union-attr]
        return rc


def stop_all(workers: set[Worker]) -> None:
    for w in list(workers):
        w.stop()
    workers.clear()
