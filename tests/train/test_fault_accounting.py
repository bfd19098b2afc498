"""Faults never become results (issue 41): real Tunix runs of the tiny default, in-process.

An errored reward is null in samples.jsonl with its error text and counted under `errors`; an eval whose errored
share exceeds reward.max_error_ratio stops the run, with a restorable checkpoint, before reporting accuracy.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlexp.errors import RlexpError
from rlexp.rewards.registry import register
from tests.helpers import SHORT, in_eval
from tests.train.test_training_e2e import records, run

pytestmark = pytest.mark.slow
TRAINED = {"calls": 0}


@register("test_nan_first_then_eval_down")
def _nan_first_then_eval_down():
    def test_nan_first_then_eval_down(prompts, completions, **_):  # noqa: ANN001, ANN202
        if in_eval():
            if TRAINED["calls"]:  # the evals after training began: the service is down
                raise RuntimeError("grader service down")
            return [0.0] * len(completions)
        TRAINED["calls"] += 1
        test_nan_first_then_eval_down.last_error = "grader: row 0 timed out"
        return [math.nan] + [0.0] * (len(completions) - 1)

    return test_nan_first_then_eval_down


def test_errored_rewards_are_null_and_an_eval_over_budget_stops_with_a_checkpoint(tmp_path: Path) -> None:
    TRAINED["calls"] = 0
    overrides = [
        *SHORT,
        "trainer.max_steps=4",
        "trainer.eval_every=2",
        "trainer.checkpoint_every=4",  # step 2 is no checkpoint step: the stop saves it
        "reward.max_error_ratio=0.4",
        "reward.functions=[{fn: arith_correct}, {fn: test_nan_first_then_eval_down, weight: 0.0}]",
    ]
    with pytest.raises(RlexpError, match=r"reward.max_error_ratio=0.4: 50% of the eval's reward values .*service down"):
        run(tmp_path, overrides)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["train"]["steps"] == 2
    assert "2" in [p.name for p in (tmp_path / "checkpoints" / "actor").iterdir()]
    assert list(json.loads((tmp_path / "evals.json").read_text())) == ["before"]  # no accuracy from the failed eval
    samples = [r for r in records(tmp_path, "samples.jsonl") if r["step"] == 1]
    errored = [r for r in samples if r["reward"] is None]
    assert len(errored) == 1 and errored[0]["rewards"]["test_nan_first_then_eval_down"] is None
    assert errored[0]["errors"] == {"test_nan_first_then_eval_down": "grader: row 0 timed out"}
    assert all(isinstance(r["reward"], float) and "errors" not in r for r in samples if r is not errored[0])
    step1 = next(r for r in records(tmp_path) if r["step"] == 1 and "rewards/test_nan_first_then_eval_down/errors" in r)
    assert step1["rewards/test_nan_first_then_eval_down/errors"] == 1.0
    before = next(r for r in records(tmp_path) if r["step"] == 0 and "eval/pass_at_1" in r)
    assert before["eval/rewards/test_nan_first_then_eval_down/errors"] == 0.0  # the eval's own accounting
