"""`reward=string_match`: extract, reference and match modes over a table of cases, and its config errors."""

from __future__ import annotations

import pytest

from rlexp.config.schema import RewardConfig, RewardFnConfig
from rlexp.errors import ConfigError
from rlexp.rewards.compose import build_rewards
from rlexp.rewards.registry import check_kwargs
from rlexp.rewards.string_match import score_one


@pytest.mark.parametrize(
    ("text", "ref", "opts", "want"),
    [
        ("42", "42", {}, 1.0),
        ("  42\n", "42", {}, 1.0),  # stripped
        ("  42\n", "42", {"strip": False}, 0.0),
        ("Paris", "paris", {}, 1.0),  # case-insensitive by default
        ("Paris", "paris", {"case_sensitive": True}, 0.0),
        ("the answer is 42", "42", {}, 0.0),  # exact
        ("the answer is 42", "42", {"match": "partial"}, 1.0),
        ("the answer is 4", "42", {"match": "partial"}, 0.0),
        ("Answer: 7. Answer: 12", "12", {"extract": "regex", "pattern": r"Answer:\s*(\d+)"}, 1.0),  # last match wins
        ("Answer: 7. Answer: 12", "7", {"extract": "regex", "pattern": r"Answer:\s*(\d+)"}, 0.0),
        ("no answer here", "7", {"extract": "regex", "pattern": r"Answer:\s*(\d+)"}, 0.0),
        ("<b>yes</b>", "<b>yes</b>", {"extract": "regex", "pattern": r"<b>.*?</b>"}, 1.0),  # no group: whole match
        ("colour", r"colou?r", {"match": "regex"}, 1.0),
        ("COLOR!", r"^colou?r", {"match": "regex"}, 1.0),
        ("COLOR!", r"^colou?r", {"match": "regex", "case_sensitive": True}, 0.0),
        ("x", "y", {"correct_value": 2.0, "wrong_value": -1.0}, -1.0),
        ("y", "y", {"correct_value": 2.0, "wrong_value": -1.0}, 2.0),
    ],
)
def test_cases(text: str, ref: str, opts: dict, want: float) -> None:
    assert score_one(text, ref, **opts) == want


def test_reference_template_reads_the_rows_columns() -> None:
    fns = [RewardFnConfig(fn="string_match", kwargs={"reference": "{references.city}, {references.country}"})]
    rs = build_rewards(RewardConfig(name="s", functions=fns))
    out = rs.fns[0](["q", "q"], ["Paris, France", "Lyon"], city=["Paris", "Lyon"], country=["France", "France"])
    assert out == [1.0, 0.0]
    default = build_rewards(RewardConfig(name="s", functions=[RewardFnConfig(fn="string_match")]))
    assert default.fns[0](["q", "q"], ["4", "5"], answer=["4", "4"]) == [1.0, 0.0]
    assert default.fns[0](["q"], ["4"]) == [0.0]  # no answer column: an errored call, scored 0
    assert "rows have no 'answer'" in default.stats.last_error["string_match"]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"match": "fuzzy"}, "kwargs.match"),
        ({"extract": "regex"}, "kwargs.pattern"),
        ({"extract": "regex", "pattern": "("}, "kwargs.pattern"),
        ({"reference": "{answer}"}, "kwargs.reference"),
        ({"extract": "xml"}, "kwargs.extract"),
    ],
)
def test_bad_kwargs_are_config_errors(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_kwargs("string_match", kwargs, "reward.functions[0].kwargs")
