"""Reward composition: sum vs weighted_mean_clipped, per-reward metrics, error budget, python rewards."""

from __future__ import annotations

import math

import pytest

from rlexp.config.schema import RewardConfig, RewardFnConfig
from rlexp.errors import ConfigError
from rlexp.rewards.compose import RewardErrorBudgetExceeded, build_rewards
from tests.helpers import REPO, compose_conf

G = "tests.fixtures.recipes.graders"


def _cfg(*fns: RewardFnConfig, combine: str = "sum", max_error_ratio: float = 0.8) -> RewardConfig:
    return RewardConfig(name="t", functions=list(fns), combine=combine, max_error_ratio=max_error_ratio)


def _py(function: str, name: str, weight: float = 1.0, **kw: object) -> RewardFnConfig:
    return RewardFnConfig(fn="python", name=name, weight=weight, kwargs={"function": function, **kw})


def test_sum_keeps_one_weighted_callable_per_reward() -> None:
    rs = build_rewards(_cfg(_py(f"{G}:length_penalty", "len", 0.5), RewardFnConfig(fn="format", weight=2.0)))
    assert [f.__name__ for f in rs.fns] == ["len", "format"]
    c = ["<reasoning>a</reasoning><answer>1</answer>", "x" * 50]
    assert [f(["p", "p"], c) for f in rs.fns] == [[-0.5 * len(c[0]) / 100, -0.25], [2.0, 0.0]]
    m = rs.step_metrics()
    assert m["rewards/format/mean"] == 0.5 and m["rewards/len/clip_ratio"] == 0.0 and m["rewards/error_ratio"] == 0.0


def test_weighted_mean_clipped_clips_each_reward_and_reports_the_ratio() -> None:
    rs = build_rewards(
        _cfg(_py(f"{G}:too_big", "big", 1.0), RewardFnConfig(fn="format", weight=3.0), combine="weighted_mean_clipped")
    )
    (fn,) = rs.fns
    out = fn(["p", "p"], ["<reasoning>a</reasoning><answer>1</answer>", "none"])
    assert out == [(1.0 + 3.0) / 4, 1.0 / 4]  # 5.0 clipped to 1.0 before weighting
    m = rs.step_metrics()
    assert m["rewards/big/clip_ratio"] == 1.0 and m["rewards/format/clip_ratio"] == 0.0
    assert m["rewards/big/mean"] == 1.0


def test_errors_and_nan_count_and_the_budget_aborts_with_the_cause() -> None:
    rs = build_rewards(_cfg(_py(f"{G}:nan_reward", "nan"), RewardFnConfig(fn="format"), max_error_ratio=0.4))
    for f in rs.fns:
        assert f(["p"] * 4, ["a"] * 4) == [0.0] * 4  # NaN scores 0
    assert rs.stats.error_ratio() == 0.5
    with pytest.raises(RewardErrorBudgetExceeded, match="50% of the step's reward calls"):
        rs.step_metrics()
    ok = build_rewards(_cfg(_py(f"{G}:nan_reward", "nan"), RewardFnConfig(fn="format"), max_error_ratio=0.8))
    for f in ok.fns:
        f(["p"] * 4, ["a"] * 4)
    m = ok.step_metrics()
    assert m["rewards/nan/non_finite"] == 4.0 and m["rewards/error_ratio"] == 0.5
    assert ok.step_metrics() == {"rewards/error_ratio": 0.0}  # drained


def test_item_mode_isolates_a_failing_item(tmp_path) -> None:  # noqa: ANN001
    rs = build_rewards(_cfg(_py(f"{G}:per_item", "item", call="item")))
    (fn,) = rs.fns
    # the failing item leaves its group (here the whole batch): it takes the valid items' mean
    assert fn(["p"] * 3, ["answer 5", "boom", "4"], answer=["5", "5", "5"]) == [1.0, 0.5, 0.0]
    m = rs.step_metrics()
    assert m["rewards/item/non_finite"] == 1.0 and rs.stats.last_error["item"] == "RuntimeError: item failed"


def test_python_reward_from_a_file_with_kwargs(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "my_reward.py"
    path.write_text("def score(prompts, completions, bonus=0.0, **_):\n    return [bonus for _ in completions]\n")
    rs = build_rewards(_cfg(_py(f"{path}:score", "file", kwargs={"bonus": 0.25})))
    assert rs.fns[0](["p"], ["c"]) == [0.25]


def test_bad_reward_specs_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="defines no function"):
        build_rewards(_cfg(_py(f"{G}:absent", "x")))
    with pytest.raises(ConfigError, match="cannot import"):
        build_rewards(_cfg(_py("no_such_module_rlexp:f", "x")))
    with pytest.raises(ConfigError, match="takes"):
        build_rewards(_cfg(RewardFnConfig(fn="format", kwargs={"nope": 1})))
    with pytest.raises(ConfigError, match="weights must sum"):
        build_rewards(_cfg(RewardFnConfig(fn="format", weight=0.0), combine="weighted_mean_clipped"))


@pytest.mark.parametrize("option", ["arith", "math", "format", "math_format", "maxtext_math", "composite", "http"])
def test_reward_options_compose_and_build(option: str) -> None:
    rs = build_rewards(compose_conf([f"reward={option}"]).reward)
    try:
        assert rs.fns and rs.rewards
    finally:
        rs.close()


def test_python_option_needs_a_function() -> None:
    conf = compose_conf(["reward=python", f"reward.functions.0.kwargs.function={G}:length_penalty"])
    assert build_rewards(conf.reward).fns[0](["p"], ["x" * 10]) == [-0.1]
    assert (REPO / "conf" / "reward" / "python.yaml").read_text().count("???") == 1


def test_an_errored_sample_leaves_its_group() -> None:
    """Groups of 4 completions: NaN (an errored item) takes the mean of its group's valid values, so the group's
    mean and every other sample's advantage stay as they were without it; an all-errored group scores 0."""
    from rlexp.rewards.compose import leave_group

    nan = float("nan")
    values = [1.0, nan, 0.0, 0.5, nan, nan, nan, nan, 0.2, 0.2, nan, 0.8]
    out = leave_group(values, 4)
    assert out[:4] == [1.0, 0.5, 0.0, 0.5] and out[4:8] == [0.0] * 4
    assert out[8:] == pytest.approx([0.2, 0.2, 0.4, 0.8])
    assert sum(out[8:]) / 4 == pytest.approx((0.2 + 0.2 + 0.8) / 3)  # the valid values' mean
    assert leave_group([nan, 1.0, 3.0], 4) == [2.0, 1.0, 3.0]  # a batch not of whole groups: one group


def test_build_rewards_fills_errored_items_per_group() -> None:
    from rlexp.rewards.registry import register

    @register("test_every_second_errors")
    def _factory():
        return lambda prompts, completions, **_: [float("nan") if i % 2 else 1.0 + i for i in range(len(completions))]

    cfg = RewardConfig(name="t", functions=[RewardFnConfig(fn="test_every_second_errors", range=[0.0, 4.0])])
    rs = build_rewards(cfg, group_size=2)
    assert rs.fns[0](["p"] * 4, ["c"] * 4) == [1.0, 1.0, 3.0, 3.0]
    assert rs.step_metrics()["rewards/test_every_second_errors/non_finite"] == 2.0


def test_a_value_outside_the_declared_range_is_an_errored_value_naming_row_and_range() -> None:
    from rlexp.rewards.registry import register

    @register("test_one_huge")
    def _factory():
        return lambda prompts, completions, **_: [1e30 if i == 1 else 0.5 for i in range(len(completions))]

    rs = build_rewards(RewardConfig(name="t", functions=[RewardFnConfig(fn="test_one_huge")]), group_size=2)
    assert rs.fns[0](["p"] * 4, ["c"] * 4) == [0.5] * 4  # the huge value leaves its group
    assert rs.stats.last_error["test_one_huge"] == "row 1: returned 1e+30, outside reward.functions[0].range=[-1, 1]"
    m = rs.step_metrics()
    assert m["rewards/test_one_huge/out_of_range"] == 1.0 and m["rewards/error_ratio"] == 0.25


def test_every_errored_value_counts_under_errors_with_its_text_per_row() -> None:
    """A NaN (the sandbox's, a judge's), an out-of-range value and a raise all count under `errors`; each row keeps
    its value or its error text (samples.jsonl's null)."""
    from rlexp.rewards.compose import RewardStats, scored

    stats = RewardStats()

    def nan_first(prompts, completions, **_):  # noqa: ANN001, ANN202
        nan_first.last_error = "sandbox: bwrap failed"
        return [math.nan, 0.5, 7.0]

    fn = scored("code", nan_first, stats, bounds=("reward.functions[0].range", 0.0, 1.0))
    fn(["p"] * 3, ["c"] * 3)
    assert stats.rows["code"][0] == (None, "sandbox: bwrap failed") and stats.rows["code"][1] == (0.5, None)
    assert stats.rows["code"][2][0] is None and "outside reward.functions[0].range" in stats.rows["code"][2][1]
    m = stats.drain()
    assert m["rewards/code/errors"] == 2 and m["rewards/code/non_finite"] == 1 and m["rewards/code/out_of_range"] == 1
    assert m["rewards/code/rpc_error_ratio"] == 0.0  # nothing raised
    assert not stats.rows
