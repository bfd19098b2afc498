"""A second Ctrl-C stops a run at once even while the main thread is inside a long C call (a jitted step, a copy
off the device), where Python would run one handler for both presses, late."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers import REPO, ctrl_c_twice

# The main thread in one C call for about argv[2] seconds (pbkdf2 neither returns to Python nor checks for signals,
# as a step blocked on the device), its rounds calibrated by a short call first.
SCRIPT = textwrap.dedent(
    """
    import hashlib, sys, time
    from rlexp.train.graceful_stop import GracefulStop

    def in_c(rounds):
        hashlib.pbkdf2_hmac("sha256", b"rlexp", b"salt", rounds)

    t = time.monotonic(); in_c(200_000); rate = 200_000 / (time.monotonic() - t)
    with GracefulStop(run_dir=sys.argv[1]):
        print("in C", flush=True)
        in_c(int(rate * float(sys.argv[2])))
        print("the C call returned", flush=True)
    """
)


def _interrupt(run_dir: Path, seconds: int, press: Callable[[subprocess.Popen], None]) -> tuple[int, str, str, float]:
    """SCRIPT's exit code, stdout and stderr, and the seconds from `press` to its end, pressed 0.3 s into the call."""
    cmd = [sys.executable, "-c", SCRIPT, str(run_dir), str(seconds)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "in C\n"
        time.sleep(0.3)
        sent = time.monotonic()
        press(proc)
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err, time.monotonic() - sent
    finally:
        proc.kill()


def test_a_second_ctrl_c_during_a_long_c_call_stops_at_once_in_one_line(tmp_path: Path) -> None:
    unfinished = tmp_path / "checkpoints" / "actor" / "4.orbax-checkpoint-tmp-17"
    unfinished.mkdir(parents=True)
    (tmp_path / "checkpoints" / "actor" / "2").mkdir()
    code, out, err, took = _interrupt(tmp_path, 8, ctrl_c_twice)
    assert code == 130, (code, out, err)
    assert "the C call returned" not in out and took < 4.0, (out, took)  # stopped inside the call, not after it
    assert err.splitlines() == [
        f"rlexp: error: {tmp_path}: interrupted twice (Ctrl-C), stopped at once; rerun the same command to resume "
        "from its newest checkpoint"
    ], err
    assert not unfinished.exists() and (tmp_path / "checkpoints" / "actor" / "2").is_dir()


def test_a_single_ctrl_c_only_asks_for_a_checkpoint_and_the_process_goes_on(tmp_path: Path) -> None:
    code, out, err, _ = _interrupt(tmp_path, 1, lambda proc: proc.send_signal(signal.SIGINT))
    assert code == 0 and "the C call returned" in out, (code, out, err)
    assert "SIGINT received; saving a checkpoint after this step" in err and "rlexp: error" not in err, err
