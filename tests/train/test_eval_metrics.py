"""pass@k, maj@k and MaxText's eval modes against tables computed by hand."""

from __future__ import annotations

import pytest

from rlexp.train.eval_metrics import (
    Scored,
    maj_at_k,
    mode_scores,
    pass_at_k,
    sampled_metrics,
    strategy_metrics,
    within_ten_percent,
)


def s(correct: bool, answer: str | None, partial: bool | None = None, formatted: bool = True) -> Scored:
    return Scored(correct, correct if partial is None else partial, formatted, answer)


# (n, c, k) -> 1 - C(n-c, k) / C(n, k), by hand
@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 1, 0.25),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
        (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (4, 0, 3, 0.0),  # c = 0
        (4, 4, 1, 1.0),  # c = n
        (4, 3, 2, 1.0),  # n - c < k
        (10, 3, 4, 1 - 35 / 210),
    ],
)
def test_pass_at_k_matches_hand_table(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_refuses_k_beyond_samples() -> None:
    with pytest.raises(ValueError, match="k in"):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError, match="c=3"):
        pass_at_k(2, 3, 1)


def test_maj_at_k_takes_the_first_most_common_answer() -> None:
    group = [s(False, "3"), s(True, "4"), s(True, "4"), s(False, "3"), s(False, "3")]
    # k=1: "3" wrong; k=3: "4" twice; k=4: tie 2-2, first seen ("3") wins; k=5: "3" three times
    assert [maj_at_k(group, k) for k in (1, 2, 3, 4, 5)] == [0.0, 0.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="maj@6"):
        maj_at_k(group, 6)


def test_sampled_metrics_average_over_prompts() -> None:
    groups = [[s(True, "1"), s(False, "2")], [s(False, "5"), s(False, "5")]]
    out = sampled_metrics(groups, [1, 2])
    assert out == {"pass_at_1": 0.25, "maj_at_1": 0.5, "pass_at_2": 0.5, "maj_at_2": 0.5}


def test_modes_follow_maxtext() -> None:
    passes = [s(True, "7", formatted=False), s(False, "8", partial=True)]
    # pass: no completion has all three flags, so the last one's are kept (MaxText's loop)
    assert mode_scores(passes, "pass") == (0.0, 1.0, 1.0)
    assert mode_scores([s(False, "1"), s(True, "2"), s(False, "3")], "pass") == (1.0, 1.0, 1.0)
    assert mode_scores(passes, "pass_at_1") == (0.5, 1.0, 0.5)
    maj = [s(False, "3", formatted=False), s(True, "4", formatted=False), s(False, "3", formatted=True)]
    assert mode_scores(maj, "maj") == (0.0, 0.0, 1.0)  # "3" wins; one "3" completion is formatted
    with pytest.raises(ValueError, match="eval_mode"):
        mode_scores(passes, "best")


def test_strategy_metrics_count_correct_and_total() -> None:
    out = strategy_metrics([[s(True, "1")], [s(False, "9", partial=True, formatted=False)]], "pass", 0.55)
    assert out == {
        "correct": 1.0,
        "total": 2.0,
        "accuracy": 0.5,
        "partial_accuracy": 1.0,
        "format_accuracy": 0.5,
        "mean_reward": 0.55,
    }


@pytest.mark.parametrize(
    ("answer", "gold", "expected"),
    [("95", "100", True), ("110", "100", True), ("111", "100", False), ("89", "100", False), ("1,050", "1000", True),
     ("x", "100", False), (None, "3", False), ("1/2", "0.5", True), ("0", "0", True)],
)  # fmt: skip
def test_partial_is_within_ten_percent(answer: str | None, gold: str, expected: bool) -> None:
    assert within_ten_percent(answer, gold) is expected
