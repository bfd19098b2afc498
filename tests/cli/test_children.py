"""No child outlives rlexp (rlexp.children): Ctrl-C, SIGTERM and SIGKILL of a command while its reward's worker
runs (`rlexp validate reward=python`, a short training run with reward=python) leave no process running."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import SHORT, rlexp_command, rlexp_env

# the first call (a preflight's) scores; every later one (training's, with the tracker's process up) hangs
SLEEPY = """import os, time
def forever(prompts, completions, **fields):
    mark = os.path.join(os.path.dirname(os.path.abspath(__file__)), "called")
    if os.path.exists(mark):
        time.sleep(3600)
    open(mark, "w").close()
    return [0.0] * len(completions)
"""


def _descendants_when_busy(proc: subprocess.Popen, marker: str, timeout: float = 240.0) -> list[psutil.Process]:
    """The command's descendants once one of them runs the reward (its command line holds `marker`)."""
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        kids = parent.children(recursive=True)
        for kid in kids:
            try:  # one that has run for a second: the reward itself, not the import check before it
                if any(marker in part for part in kid.cmdline()) and time.time() - kid.create_time() > 1.0:
                    return parent.children(recursive=True)
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError("the reward's child process never started")


def _left_running(kids: list[psutil.Process], grace: float = 20.0) -> list[str]:
    deadline = time.monotonic() + grace
    alive = kids
    while time.monotonic() < deadline:
        alive = [k for k in alive if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return [f"{k.pid} {' '.join(k.cmdline())[:120]}" for k in alive]


def _interrupt(args: list[str], module: str, sig: int, tmp: Path) -> tuple[int, str, list[str], str]:
    """Run the command, signal it while its reward runs; its status, stderr, the children left running and the
    command lines of the children it had."""
    (tmp / "sleepy.py").write_text(SLEEPY)
    proc = subprocess.Popen(
        rlexp_command(*args, module=module),
        cwd=tmp,
        env=rlexp_env({k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a terminal's foreground job: SIGINT goes to the group
    )
    try:
        kids = _descendants_when_busy(proc, "die_with_parent")  # rlexp.children's prelude to the reward's worker
        names = " ".join(" ".join(k.cmdline())[:200] for k in kids if k.is_running())
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C: the terminal signals the whole foreground group
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err, _left_running(kids), names
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_validate_leaves_no_reward_process(sig: int, tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_text('{"id": "q1", "prompt": "1+1=", "answer": "2", "completion": "2"}\n')
    args = [
        "reward=python",
        f"reward.functions.0.kwargs.function={tmp_path}/sleepy.py:forever",
        f"validate.completions={tmp_path}/c.jsonl",
        f"hydra.run.dir={tmp_path}/run",
    ]
    (tmp_path / "called").touch()  # validate's one call hangs
    code, err, left, _ = _interrupt(args, "rlexp.validate", sig, tmp_path)
    assert not left, f"still running after {signal.Signals(sig).name}: {left}"
    if sig == signal.SIGINT:
        assert code == 130 and err.strip().splitlines()[-1].startswith("rlexp: error: interrupted"), err[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_training_leaves_no_reward_process(sig: int, tmp_path: Path) -> None:
    args = [
        *SHORT,
        "reward=python",
        f"reward.functions.0.kwargs.function={tmp_path}/sleepy.py:forever",
        "reward.functions.0.kwargs.timeout_s=3600",
        "logger=tensorboard",  # the tracker's process too
        f"hydra.run.dir={tmp_path}/run",
    ]
    _, err, left, names = _interrupt(args, "rlexp", sig, tmp_path)
    assert "rlexp.tracking.worker" in names, names  # killed while training: the tracker's process was up
    assert not left, f"still running after {signal.Signals(sig).name}: {left}\n{err[-2000:]}"
