"""The one rule for every child process rlexp starts: it dies with its parent.

Ctrl-C, SIGTERM or SIGKILL of an rlexp command must leave nothing running: not a reward's worker (in its own
session, so a terminal's SIGINT never reaches it), not the grader pool, not a sandbox's forked items, not the
tracker. Each child calls `die_with_parent` first thing (Linux: `prctl(PR_SET_PDEATHSIG, SIGKILL)`, elsewhere a
thread watching the parent's pid), then checks that its parent is still the one that started it, closing the
race of a parent that died before the call. Done in the child, not in a `preexec_fn`: that would be unsafe in
a process with JAX's threads and would lose subprocess's fast spawn path.

Who calls it: rlexp's own Python children at their start (`rlexp.tracking.worker` through `watch_parent`,
which leaves the tracker a grace to finish the run as failed; `rlexp.rewards.grading`'s pool workers); children
run as `python -I -c <source>` (the sandbox worker, which imports nothing of rlexp) get `prelude(parent)`
before their source, and the same function for the items they fork; bubblewrap itself gets `--die-with-parent`.
`die_with_parent` uses the standard library only, so `prelude` can hand its very source to such a child.

Note: Linux sends the signal when the *thread* that started the child ends; rlexp starts each child from a
thread that outlives it (a reward call waits for its worker), or from the main thread.
"""

from __future__ import annotations

import inspect
import os
import threading
import time


def die_with_parent(parent: int = 0, sig: int = 9) -> None:
    """In a child: get `sig` (SIGKILL) when the parent dies; exit now if `parent` (a pid) is no longer it."""
    import ctypes
    import os
    import sys
    import threading
    import time

    armed = False
    if sys.platform.startswith("linux"):
        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0) == 0  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
    start = os.getppid()
    if parent and start != parent:
        os._exit(1)
    if not armed:

        def watch() -> None:
            while os.getppid() == start:
                time.sleep(0.2)
            os.kill(os.getpid(), sig)

        threading.Thread(target=watch, daemon=True, name="rlexp-parent-watch").start()


def prelude(parent: int) -> str:
    """Python source to run before a `python -I -c` child's own: defines `die_with_parent` and calls it with
    `parent` (0 where the child's parent is not this process, e.g. inside bubblewrap's pid namespace)."""
    return f"{inspect.getsource(die_with_parent)}\ndie_with_parent({int(parent)})\n"


def watch_parent(grace_s: float, poll_s: float = 0.2) -> None:
    """In a child that should finish its work when the parent dies (the tracker finishes the run as failed on
    end of input): end it `grace_s` after the parent is gone, whatever it is doing then."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="rlexp-parent-watch").start()
