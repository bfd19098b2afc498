"""Answer extraction, exact grading, math-verify in the worker pool, the grader timeout, and the format reward."""

from __future__ import annotations

import math
import os
import time

import pytest

from rlexp.rewards.extract import extract_answer, quick_equal
from rlexp.rewards.grading import GraderPool
from rlexp.rewards.registry import make_reward_fn


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("<reasoning>r</reasoning><answer>72</answer>", "72"),
        ("<answer>\\boxed{3} dollars</answer>", "3"),  # a boxed value inside the answer tag wins
        ("so it is \\boxed{1,000}.", "1,000"),
        ("first \\boxed{4}, corrected: \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # several boxed: the last
        ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),  # nested braces
        ("#### -5", "-5"),
        ("\\boxed{12", None),  # unbalanced braces
        ("no answer here", None),
        ("<answer>  </answer>", None),
    ],
)
def test_extract_answer(completion: str, answer: str | None) -> None:
    assert extract_answer(completion) == answer


@pytest.mark.parametrize(
    ("predicted", "gold", "equal"),
    [
        ("1,000", "1000", True),
        ("$72.00", "72", True),
        ("\\$72", "72", True),
        ("\\frac{1}{2}", "0.5", True),
        ("\\dfrac{3}{4}", "3/4", True),
        ("-3", "-3", True),
        ("\u22123", "-3", True),  # unicode minus
        ("-3", "3", False),
        ("10 \\text{ cm}", "10", True),
        ("5 dollars", "5", True),
        ("x = 5", "5", True),
        ("50\\%", "50", True),
        ("72", "73", False),
        ("\\sqrt{2}", "\\sqrt 2", None),  # not a plain number: math-verify decides
    ],
)
def test_quick_equal(predicted: str, gold: str, equal: bool | None) -> None:
    assert quick_equal(predicted, gold) is equal


def test_math_reward_grades_numbers_in_process_and_latex_with_math_verify() -> None:
    fn = make_reward_fn("math", {"processes": 1, "timeout_s": 30.0})
    try:
        completions = ["\\boxed{72}", "<answer>$72.00</answer>", "\\boxed{71}", "nothing", "\\boxed{5\\sqrt{2}}",
                       "\\boxed{\\sqrt{50}}", "\\boxed{7.07}"]  # fmt: skip
        answers = ["72", "72", "72", "72", "5\\sqrt{2}", "5\\sqrt{2}", "5\\sqrt{2}"]
        assert fn(["p"] * 4, completions[:4], answer=answers[:4]) == [1.0, 1.0, 0.0, 0.0]
        assert fn.pool is None  # plain numbers never start a grader process
        assert fn(["p"] * 3, completions[4:], answer=answers[4:]) == [1.0, 1.0, 0.0]
        assert len(fn.pool.alive()) == 1
    finally:
        fn.close()


def test_hanging_grader_times_out_and_the_pool_recovers_without_leaking() -> None:
    pool = GraderPool("tests.fixtures.recipes.graders:hang_on_marker", processes=2, timeout_s=1.0)
    try:
        t0 = time.monotonic()
        out = pool.grade([("a", "a"), ("hang", "x"), ("b", "c"), ("hang", "y"), ("d", "d")])
        elapsed = time.monotonic() - t0
        assert out == [True, None, False, None, True]
        assert pool.timeouts == 2
        assert elapsed < 15  # two 1 s timeouts in parallel workers plus restarts, never the 3600 s sleep
        pids = pool.alive()
        assert len(pids) == 2 and pool.grade([("e", "e")]) == [True]  # replaced workers serve on
    finally:
        pool.close()
    time.sleep(0.2)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert pool.alive() == []


def test_grader_exception_and_timeout_are_errored_invocations() -> None:
    fn = make_reward_fn(
        "math", {"grader": "tests.fixtures.recipes.graders:crash_on_marker", "processes": 1, "timeout_s": 5.0}
    )
    try:
        out = fn(["p", "p"], ["\\boxed{crash}", "\\boxed{ok}"], answer=["x", "ok"])
        assert math.isnan(out[0]) and out[1] == 1.0
        assert fn.pool.failures == 1
    finally:
        fn.close()


def test_format_reward() -> None:
    fn = make_reward_fn("format")
    completions = [
        "<reasoning>think</reasoning>\n<answer>5</answer>",
        "<reasoning>think</reasoning><answer></answer>",
        "<answer>5</answer>",
        "text <reasoning>a</reasoning> <answer>5</answer> trailing",
    ]
    assert fn(["p"] * 4, completions) == [1.0, 0.0, 0.0, 1.0]
    strict = make_reward_fn("format", {"whole": True})
    assert strict(["p"], completions[3:]) == [0.0]
    prefilled = make_reward_fn("format", {"reasoning_in_prompt": True})
    assert prefilled(["p"], ["thinking...</reasoning><answer>1</answer>"]) == [1.0]
