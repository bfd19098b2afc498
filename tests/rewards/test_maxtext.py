"""The seeds' reward stack (`reward=maxtext_math`), case by case over every extraction branch."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest

from rlexp.rewards.compose import build_rewards
from rlexp.rewards.maxtext import FALLBACK_ANSWER, extract_answer, last_balanced_boxed
from rlexp.rewards.maxtext_normalize import boxed, preprocess
from rlexp.rewards.registry import make_reward_fn
from tests.helpers import compose_conf

R, A = "<reasoning>think</reasoning>", "<answer>{}</answer>"


@pytest.mark.parametrize(
    ("completion", "extracted"),
    [
        # 1. the last <answer> block is the scope; a balanced \boxed{} inside it wins
        (R + A.format("so \\boxed{72} dollars"), "72"),
        (A.format("\\boxed{1}") + " then " + A.format("\\boxed{2}"), "2"),  # the last block
        (A.format("\\boxed{\\frac{\\sqrt{3}}{2}}"), "\\frac{\\sqrt{3}}{2}"),  # nested braces
        (A.format("\\boxed{\\boxed{7}}"), "\\boxed{7}"),  # the boxed whose brace closes last
        (A.format("\\boxed{4} or \\boxed{5}"), "5"),
        (A.format("\\boxed{}"), ""),  # an empty box is an answer (an empty one)
        # 2. no balanced box in scope: the first loose `\boxed 12` / unclosed `\boxed{12`
        (A.format("\\boxed 12 and \\boxed 13"), "12"),
        (A.format("\\boxed{12"), "12"),
        # 3. no box in scope: the text of the last answer block
        (A.format(" 72 "), "72"),
        (A.format("7") + " \\boxed{42}", "7"),  # a \boxed{} outside an existing answer block is ignored
        ("\\boxed{42} " + A.format("7"), "7"),
        (A.format(" "), ""),  # white space only: an empty answer
        # without any answer block the whole completion is the scope
        ("The answer is \\boxed{42}.", "42"),
        ("first \\boxed{4}, then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("} stray brace \\boxed{3}", "3"),  # an unmatched closing brace is ignored
        ("it is \\boxed 9", "9"),
        # 4. nothing extractable: the fallback
        ("no answer here", FALLBACK_ANSWER),
        ("<answer></answer>", FALLBACK_ANSWER),  # an answer block needs one character
        ("#### 72", FALLBACK_ANSWER),  # GSM8K's marker is not an answer here
        ("<answer>72", FALLBACK_ANSWER),  # unclosed tag
    ],
)
def test_extract_answer_order(completion: str, extracted: str) -> None:
    assert extract_answer(completion) == extracted


def test_custom_answer_tags_and_balanced_scan() -> None:
    assert extract_answer("<final>9</final>", "<final>", "</final>") == "9"
    assert extract_answer("<answer>9</answer>", "<final>", "</final>") == FALLBACK_ANSWER
    assert last_balanced_boxed("\\boxed {1}") is None  # the balanced scan wants \boxed right before {
    assert extract_answer("\\boxed {1}") == "1"  # ... the loose pattern takes it


# Pydantic-default values of the seed, all distinct, so every branch shows in the score.
SPREAD = {"reward_exact_answer": 5.0, "reward_white_space_format_match": 3.0, "penalty_incorrect_format": -0.5,
          "penalty_incorrect_answer": -1.0, "processes": 1, "timeout_s": 60.0}  # fmt: skip


@pytest.fixture(scope="module")
def check_numbers() -> Iterator[tuple]:
    """check_numbers with rl.yml's values and with SPREAD, shared by the cases of the table below: each starts a
    grader process that imports and warms math-verify (~0.3 s) at its first call, and a case's score depends only
    on its own completion."""
    default = make_reward_fn("check_numbers", {"processes": 1, "timeout_s": 60.0})
    custom = make_reward_fn("check_numbers", SPREAD)
    yield default, custom
    default.close()
    custom.close()


@pytest.mark.parametrize(
    ("completion", "gold", "rl_yml", "spread"),
    [
        (A.format("72"), "72", 1.0, 5.0),  # exact string
        (A.format("\\boxed{72}"), "72", 1.0, 5.0),
        (A.format("72"), " 72", 1.0, 3.0),  # equal after stripping white space
        (A.format("72 dollars"), "72", 1.0, 5.0),  # normalised, then math-verify
        (A.format("1,500"), "1500", 1.0, 5.0),
        ("\\boxed{0.5}", "\\frac{1}{2}", 1.0, 5.0),
        (A.format("\\sqrt{50}"), "5\\sqrt{2}", 1.0, 5.0),
        (A.format("x = 5"), "5", 1.0, 5.0),  # the text after the last '='
        (A.format("71"), "72", 0.0, -0.5),  # wrong: the starting value, penalty_incorrect_format
        (A.format("7") + "\\boxed{72}", "72", 0.0, -0.5),  # the box outside <answer> does not count
        (A.format(" "), "72", 0.0, -0.5),
        ("no answer", "72", 0.0, -1.0),  # the fallback: penalty_incorrect_answer
        ("#### 72", "72", 0.0, -1.0),
    ],
)
def test_check_numbers_values(completion: str, gold: str, rl_yml: float, spread: float, check_numbers: tuple) -> None:
    default, custom = check_numbers
    assert default(["p"], [completion], answer=[gold]) == [rl_yml]
    assert custom(["p"], [completion], answer=[gold]) == [spread]


def test_check_numbers_exact_strings_need_no_grader_and_lists_are_alternatives() -> None:
    fn = make_reward_fn("check_numbers", {"processes": 1, "timeout_s": 60.0})
    try:
        assert fn(["p"] * 2, [A.format("72"), "none"], answer=["72", "72"]) == [1.0, 0.0]
        assert fn.pool is None  # exact matches and the fallback never start a grader process
        assert fn(["p"], [A.format("B")], answer=[["10", "B"]]) == [1.0]  # MCQ: letter or value
    finally:
        fn.close()


def hang_on_seven(predicted: str, gold: str) -> bool:
    """A grader stuck (in sympy, say) on the answer 7; string equality otherwise. Runs in a worker process."""
    if predicted == "\\boxed{7}":
        time.sleep(3600)
    return predicted == gold


@pytest.mark.slow
def test_grader_timeout_is_an_errored_invocation() -> None:
    grader = "tests.rewards.test_maxtext:hang_on_seven"
    fn = make_reward_fn("check_numbers", {"processes": 1, "timeout_s": 2.0, "grader": grader})
    try:
        out = fn(["p", "p"], [A.format("7"), A.format("9.0")], answer=["8", "9"])  # both need the grader
        assert math.isnan(out[0]) and out[1] == 1.0
        assert fn.pool.timeouts == 1
    finally:
        fn.close()


@pytest.mark.parametrize(
    ("completion", "exact", "in_prompt"),
    [
        (R + A.format("5"), 0.1, 0.1),
        (R + "\n\n" + A.format("5") + " trailing text", 0.1, 0.1),  # anywhere in the text
        ("preamble " + R + "more" + A.format("5"), 0.1, 0.1),
        (R + "<answer></answer>", 0.0, 0.0),  # an empty answer
        (A.format("5") + R, 0.0, 0.0),  # answer before reasoning
        ("<reasoning>think" + A.format("5"), 0.0, 0.0),  # reasoning never closed
        ("think</reasoning>" + A.format("5"), 0.0, 0.1),  # the opening tag was prefilled in the prompt
        (A.format("5"), 0.0, 0.0),
    ],
)
def test_match_format_exactly(completion: str, exact: float, in_prompt: float) -> None:
    assert make_reward_fn("match_format_exactly")(["p"], [completion]) == [exact]
    prefilled = make_reward_fn("match_format_exactly", {"reasoning_start_token_in_prompt": True})
    assert prefilled(["p"], [completion]) == [in_prompt]


@pytest.mark.parametrize(
    ("completion", "spread", "in_prompt"),
    [
        (R + A.format("5"), 2.0, 2.0),  # every tag once: 4 x 0.5
        (R + A.format("5") + A.format("6"), 0.0, 0.0),  # answer tags twice: 2 x 0.5 - 2 x 0.5
        ("think</reasoning>" + A.format("5"), 1.0, 2.0),  # the prompt holds the opening tag
        ("plain text", -2.0, -1.0),
    ],
)
def test_match_format_approximately(completion: str, spread: float, in_prompt: float) -> None:
    assert make_reward_fn("match_format_approximately")(["p"], [completion]) == [0.0]  # rl.yml: all terms 0.0
    values = {"reward_partial_format_match": 0.5, "penalty_incorrect_format": -0.5}
    assert make_reward_fn("match_format_approximately", values)(["p"], [completion]) == [spread]
    prefilled = make_reward_fn("match_format_approximately", {**values, "reasoning_start_token_in_prompt": True})
    assert prefilled(["p"], [completion]) == [in_prompt]


@pytest.mark.parametrize(
    ("answer", "normalised"),
    [
        ("72 dollars", "72"),
        ("\\$1,500", "1500"),
        ("x = 5", "5"),
        ("7 3/4", "7+3/4"),  # a mixed number
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("\\frac12", "\\frac{1}{2}"),
        ("sqrt2", "\\sqrt{2}"),  # a lost backslash comes back
        ("2.0", "2"),
        ("{42}", "42"),
        (".5", "0.5"),
        ("10 \\text{ cm}", "10"),
        ("90^\\circ", "90"),
        ("\\textbf{7}", "7"),
        ("\\boxed{3}", "3"),
        ("3 million", "3*10^6"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
    ],
)
def test_normalisation(answer: str, normalised: str) -> None:
    assert preprocess(answer) == normalised


def test_boxed_wraps_once() -> None:
    assert boxed("3") == "\\boxed{3}" and boxed("\\boxed{3}") == "\\boxed{3}"


def test_option_sums_the_three_functions_within_their_ranges() -> None:
    conf = compose_conf(["reward=maxtext_math"])
    assert [f.fn for f in conf.reward.functions][0] == "check_numbers"  # eval grades with the first function
    rs = build_rewards(conf.reward)
    try:
        completions = [R + A.format("72"), R + A.format("71"), A.format("72"), "nothing", R + A.format("\\boxed{72.0}")]
        cols = [fn(["p"] * 5, completions, answer=["72"] * 5) for fn in rs.fns]
        totals = [sum(v) for v in zip(*cols, strict=True)]
        assert totals == pytest.approx([1.1, 0.1, 1.0, 0.0, 1.1])
        for f, col in zip(conf.reward.functions, cols, strict=True):
            lo, hi = f.range
            assert all(lo <= v <= hi for v in col), (f.fn, col)  # the preflight's range check passes
        assert rs.step_metrics()["rewards/check_numbers/mean"] == pytest.approx(0.6)
    finally:
        rs.close()
