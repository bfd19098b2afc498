"""The warm sandbox worker: one bubblewrap for the run, yet nothing of a call reaches the next, limits hold per
call, concurrent calls keep their results and order, and no worker outlives the run (rlexp.children)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from rlexp.rewards.registry import make_reward_fn
from rlexp.rewards.sandbox import bwrap_problem
from tests.helpers import REPO, SHORT, run_rlexp, running


@pytest.fixture(autouse=True, scope="module")
def bubblewrap() -> None:
    assert bwrap_problem() is None, f"bubblewrap does not work here: {bwrap_problem()}"


# "leave" plants state of every kind; "look" returns one bit per kind it still finds (0.0: none)
STATE = r"""
import builtins, ctypes, os, sys, threading, time
LOOKS = 0
def _named_children(name):
    found = 0
    for pid in os.listdir("/proc"):
        try:
            found += pid.isdigit() and open(f"/proc/{pid}/comm").read().strip() == name
        except OSError:
            pass
    return found
def evaluate(example, response):
    global LOOKS
    libc = ctypes.CDLL(None, use_errno=True)
    if response["text"] == "leave":
        LOOKS = 99
        builtins.rlexp_mark = 1
        builtins.abs = lambda x: 42
        sys.modules["json"].rlexp_mark = 1
        os.environ["RLEXP_MARK"] = "1"
        open("/tmp/mark", "w").write("1")
        os.makedirs("/tmp/locked/deep")
        os.chmod("/tmp/locked", 0)
        os.chmod("/tmp", 0o500)
        threading.Thread(target=time.sleep, args=(60,), name="rlexp-mark").start()
        if os.fork() == 0:  # a daemon: its own session, its own name
            os.setsid()
            libc.prctl(15, b"rlexp-mark", 0, 0, 0)  # PR_SET_NAME
            time.sleep(60)
            os._exit(0)
        libc.shmget(4242, 4096, 0o1600)  # IPC_CREAT | 0600
        return float(libc.mq_open(b"/rlexp-mark", 0o102, 0o600, None) >= 0)  # refused: 0.0
    LOOKS += 1
    seen = [
        LOOKS != 1, hasattr(builtins, "rlexp_mark"), abs(-2) != 2, hasattr(sys.modules["json"], "rlexp_mark"),
        "RLEXP_MARK" in os.environ, os.listdir("/tmp") != [], not os.access("/tmp", os.W_OK),
        any(t.name == "rlexp-mark" for t in threading.enumerate()), _named_children("rlexp-mark") > 0,
        libc.shmget(4242, 0, 0) >= 0,
    ]
    return float(sum(bit << i for i, bit in enumerate(seen)))
"""


def test_a_call_sees_nothing_of_an_earlier_one_on_the_same_warm_worker() -> None:
    fn = make_reward_fn("code", {"snippet": STATE})
    assert fn(["p"], ["look"]) == [0.0]  # the control: a fresh call finds nothing
    first = fn.sandbox.workers()
    assert fn(["p"], ["leave"]) == [0.0]  # and no POSIX message queue could be made
    assert fn(["p"], ["look"]) == [0.0], "bits of what carried over: " + bin(int(fn(["p"], ["look"])[0]))
    assert fn.sandbox.workers() == first and len(first) == 1  # the same warm worker served all three
    assert fn.counters == {"calls": 3, "retries": 0, "failed_calls": 0}
    fn.close()
    assert fn.sandbox.workers() == [] and not psutil.pid_exists(first[0])


def test_each_completion_runs_its_tests_apart_from_the_others() -> None:
    fn = make_reward_fn("code_tests", {"item_timeout_s": 5})
    cheat = "```python\nimport builtins\nbuiltins.AssertionError = type('E', (Exception,), {})\ndef f(): return 1\n```"
    patch = "```python\nimport builtins\nbuiltins.abs = lambda x: 2\ndef f(): return 1\n```"
    wrong = "```python\ndef f(): return 1\n```"
    tests = ["assert f() == 2", "assert abs(-1) == 1"]
    assert fn(["p"] * 3, [cheat, patch, wrong], tests=[tests] * 3) == [0.5, 0.0, 0.5]
    assert fn(["p"], [wrong], tests=[tests]) == [0.5]  # the next call too


@pytest.mark.slow
def test_a_call_past_its_timeout_costs_its_worker_and_the_next_call_gets_a_fresh_one() -> None:
    fn = make_reward_fn("code", {"snippet": STATE.replace("LOOKS = 0", "import time\nLOOKS = 0"), "timeout_s": 2})
    hang = make_reward_fn("code", {"snippet": "def evaluate(e, r):\n    while True: pass\n", "item_timeout_s": 60})
    hang.sandbox.limits.timeout_s = 1.0
    start = time.perf_counter()
    assert math.isnan(hang(["p"], ["x"])[0]) and time.perf_counter() - start < 20
    assert "2 attempt(s): timed out after 1s" in hang.last_error
    assert fn(["p"], ["look"]) == [0.0]
    hang.sandbox.limits.timeout_s = 30.0
    before = hang.sandbox.workers()
    ok = make_reward_fn("code", {"snippet": "def evaluate(e, r):\n    return 1.0\n"})
    assert ok(["p"], ["x"]) == [1.0] and before == []  # the overrun worker was killed, not kept


def test_concurrent_calls_keep_their_results_and_order_on_a_pool_of_workers() -> None:
    snippet = (
        "import time\ndef evaluate(example, response):\n    time.sleep(0.05)\n    return float(response['text'])\n"
    )
    fn = make_reward_fn("code", {"snippet": snippet})
    fn.sandbox.limits.workers = 3
    batches = [[str(10 * b + i) for i in range(6)] for b in range(6)]
    out: dict[int, list[float]] = {}

    def score(b: int) -> None:
        out[b] = fn(["p"] * 6, batches[b])

    threads = [threading.Thread(target=score, args=(b,)) for b in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [out[b] for b in range(6)] == [[float(x) for x in batch] for batch in batches]
    assert 1 <= len(fn.sandbox.workers()) <= 3 and fn.counters["calls"] == 6


# builds the reward, scores once, reports its worker and the worker's descendants, then waits to be killed
KILLED = """
import json, sys, time, psutil
from rlexp.rewards.registry import make_reward_fn
fn = make_reward_fn("code", {"snippet": "def evaluate(e, r):\\n    return 1.0\\n"})
assert fn(["p"], ["x"]) == [1.0]
pids = [p for w in fn.sandbox.workers() for p in [w] + [c.pid for c in psutil.Process(w).children(recursive=True)]]
print(json.dumps(pids), flush=True)
time.sleep(600)
"""


def _gone(pids: list[int], grace: float = 15.0) -> list[int]:
    deadline = time.monotonic() + grace
    while True:
        alive = [p for p in pids if running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


@pytest.mark.slow
def test_a_killed_process_leaves_no_warm_worker(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED], cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        pids = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        assert len(pids) >= 3, pids  # bubblewrap, its init, the worker
        assert not set(pids) - {p for p in pids if psutil.pid_exists(p)}
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert _gone(pids) == [], "warm sandbox processes outlived a SIGKILLed parent"
    finally:
        if proc.poll() is None:
            proc.kill()


def _sandboxes_under(path: Path) -> list[str]:
    """Processes whose command line names `path` (bubblewrap hides the run dir under a tmpfs)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if str(path) in line and p.pid != os.getpid():
            found.append(f"{p.pid} {line[:120]}")
    return found


@pytest.mark.slow
def test_a_reward_code_run_leaves_no_sandbox_process(tmp_path: Path) -> None:
    run = tmp_path / "run"
    snippet = "reward.functions.0.kwargs.snippet='def evaluate(example, response): return 0.5'"
    proc = run_rlexp("reward=code", snippet, *SHORT, "logger=none", f"hydra.run.dir={run}", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(s.get("rewards/code/mean") == 0.5 for s in steps)  # the sandbox scored
    assert _sandboxes_under(run) == []
    assert _sandboxes_under(REPO / "no-such-folder") == []
