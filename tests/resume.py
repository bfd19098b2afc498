"""SIGTERM at a known training step, then the same command again: the shape of every resume-equivalence test.

`sigterm_then_resume` runs a config uninterrupted, then again in a second run dir with SIGTERM delivered on the
N-th training call of the zero-weight reward `test_sigterm_at_call` (one call per step, as a pod eviction would
deliver it), checks that run stopped at the expected step, and resumes it with the same command. The caller
compares the two run dirs with `assert_same_steps` and whatever its feature adds (queues, weights, evals).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from rlexp.errors import RlexpError
from rlexp.rewards.registry import register
from tests.helpers import in_eval

SIGTERM_AT_CALL = {"n": None, "calls": 0}
# add to reward.functions: its weight 0 leaves the run's rewards as they are
SIGTERM_REWARD = "{fn: test_sigterm_at_call, weight: 0.0}"
TIMED = ("latency", "_time", "_sec")  # wall-clock figures: not training results


@register("test_sigterm_at_call")
def _sigterm_reward():
    def test_sigterm_at_call(prompts, completions, **_):
        if not in_eval():
            SIGTERM_AT_CALL["calls"] += 1
            if SIGTERM_AT_CALL["n"] is not None and SIGTERM_AT_CALL["calls"] == SIGTERM_AT_CALL["n"]:
                os.kill(os.getpid(), signal.SIGTERM)
        return [0.0] * len(completions)

    return test_sigterm_at_call


def sigterm_then_resume(
    run: Callable[[Path], object],
    tmp_path: Path,
    call: int,
    stopped_at: int,
    between: Callable[[Path], None] | None = None,
) -> tuple[Path, Path]:
    """(full, interrupted): `run` into tmp/full, then into tmp/interrupted with SIGTERM at training call `call`
    (the run must stop "interrupted at step `stopped_at`"; `between` inspects it then), then resumed there."""
    full, interrupted = tmp_path / "full", tmp_path / "interrupted"
    SIGTERM_AT_CALL.update(n=None, calls=0)
    run(full)
    SIGTERM_AT_CALL.update(n=call, calls=0)
    try:
        with pytest.raises(RlexpError, match=f"interrupted at step {stopped_at}"):
            run(interrupted)
    finally:
        SIGTERM_AT_CALL.update(n=None, calls=0)
    if between is not None:
        between(interrupted)
    run(interrupted)
    return full, interrupted


def train_steps(run_dir: Path) -> dict[int, dict]:
    """metrics.jsonl's training rows by step."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "loss" in r or "rewards/sum" in r}


def assert_same_steps(full: Path, interrupted: Path, steps: Iterable[int], names: Iterable[str]) -> None:
    """The resumed run logged every step once, each named figure equal to the uninterrupted run's (1e-5)."""
    resumed, reference, steps = train_steps(interrupted), train_steps(full), list(steps)
    assert sorted(resumed) == sorted(reference) == steps
    for step in steps:
        for name in names:
            if name in reference[step]:
                assert resumed[step][name] == pytest.approx(reference[step][name], rel=1e-5, abs=1e-7), (step, name)


def untimed(evaluation: dict) -> dict:
    """An eval's figures without the wall-clock ones."""
    return {k: v for k, v in evaluation.items() if not any(t in k for t in TIMED)}
