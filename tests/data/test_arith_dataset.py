"""The synthetic arith dataset: deterministic from its seed, eval problems never in train."""

from __future__ import annotations

import pytest

from rlexp.data.registry import load_splits
from rlexp.errors import ConfigError
from tests.helpers import compose_conf


def test_deterministic_and_disjoint() -> None:
    cfg = compose_conf().dataset
    a, b = load_splits(cfg), load_splits(cfg)
    assert a.train == b.train and a.eval == b.eval
    assert len(a.train) == cfg.train_size and len(a.eval) == cfg.eval_size
    assert not {r["question"] for r in a.train} & {r["question"] for r in a.eval}
    for r in a.train[:50] + a.eval[:50]:
        x, y = r["question"].rstrip("=").split("+")
        assert int(r["answer"]) == int(x) + int(y) and r["data_source"] == "arith"
    assert len({r["id"] for r in a.train + a.eval}) == len(a.train) + len(a.eval)


def test_seed_changes_the_split() -> None:
    first = load_splits(compose_conf().dataset)
    other = load_splits(compose_conf(["dataset.seed=7"]).dataset)
    assert [r["question"] for r in first.eval] != [r["question"] for r in other.eval]


def test_operators_and_bad_operator() -> None:
    rows = load_splits(compose_conf(["dataset.params.ops=[-,'*']", "dataset.eval_size=10"]).dataset).train
    assert {"-", "*"} >= {c for r in rows for c in r["question"] if c in "+-*"}
    with pytest.raises(ConfigError, match="dataset.params.ops"):
        load_splits(compose_conf(["dataset.params.ops=[/]"]).dataset)


def test_eval_size_cannot_take_every_problem() -> None:
    with pytest.raises(ConfigError, match=r"max_operand=29: gives only 900 distinct problems.*raise it to >= 30"):
        load_splits(compose_conf(["dataset.eval_size=900"]).dataset)


@pytest.mark.parametrize("value", [-1, 1000, "abc", True])
def test_an_operand_out_of_range_names_its_key(value: object) -> None:
    with pytest.raises(ConfigError, match=r"dataset.params.max_operand=.*: use an integer in \[0, 999\]"):
        load_splits(compose_conf([f"dataset.params.max_operand={value}"]).dataset)


def test_sums_whose_range_cannot_hold_the_eval_split_are_refused() -> None:
    over = ["dataset=sums", "dataset.params.min_operand=5", "dataset.params.max_operand=5"]
    with pytest.raises(ConfigError, match="dataset.params.max_operand=5: operands 5..5 give only 1"):
        load_splits(compose_conf(over).dataset)
