"""The eval scores its rewards through training's error accounting: an errored or out-of-range value is never
right, and too many of them stop the run in one line."""

from __future__ import annotations

import math

import pytest

from rlexp.rewards.compose import RewardErrorBudgetExceeded, build_rewards
from rlexp.rewards.registry import register
from rlexp.train.evaluate import Scorer
from tests.helpers import compose_conf


@register("test_eval_half_errors")
def _half_errors():
    # row 0: NaN, row 1: right, row 2: far outside [-1, 1] (it counted as right), row 3: wrong
    return lambda prompts, completions, **_: [math.nan, 1.0, 1e30, 0.0][: len(completions)]


def _scorer(max_error_ratio: float) -> Scorer:
    cfg = compose_conf(["reward.functions=[{fn: test_eval_half_errors}]", f"reward.max_error_ratio={max_error_ratio}"])
    return Scorer(cfg, build_rewards(cfg.reward))


ROWS = [{"prompt": "p", "answer": "1"}] * 4


def test_errored_and_out_of_range_values_are_never_right() -> None:
    scorer = _scorer(0.6)
    flags, totals = scorer.score(ROWS, ["c"] * 4)
    assert [f.correct for f in flags] == [False, True, False, False]
    assert math.isnan(totals[0]) and math.isnan(totals[2]) and totals[1] == 1.0
    assert scorer.stats.out_of_range["test_eval_half_errors"] == 1
    scorer.check_errors()  # 50 % <= 60 %: a warning, not a stop


def test_an_eval_over_the_error_budget_stops_in_one_line() -> None:
    scorer = _scorer(0.4)
    scorer.score(ROWS, ["c"] * 4)
    with pytest.raises(RewardErrorBudgetExceeded, match=r"50% of the eval's reward values .*row 2: returned 1e\+30"):
        scorer.check_errors()
