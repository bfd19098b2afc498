"""dataset.shuffle=maxtext selects MaxText 0.2.5's problems: datasets' train_test_split, then grain's shuffle."""

from __future__ import annotations

import json

import pytest

from rlexp.data.registry import load_splits
from rlexp.errors import ConfigError
from tests.helpers import compose_conf


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory):
    """40 problems with ids; one record without an answer."""
    folder = tmp_path_factory.mktemp("omi")
    rows = [{"uid": f"p{i}", "problem": f"{i}+1=?", "expected_answer": str(i + 1)} for i in range(40)]
    rows[5]["expected_answer"] = ""
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:12]))
    return folder


def _maxtext_ids(path: str, holdout: bool, cache: str) -> tuple[list[str], list[str]]:
    """What MaxText's prepare_datasets calls give: the ids of the shuffled train and eval splits."""
    import datasets  # here, not at the top: collecting the suite would import it in every worker (~1 s)
    import grain

    train = datasets.load_dataset("json", data_files=path, split="train", cache_dir=cache)
    if holdout:
        split = train.train_test_split(test_size=0.05, seed=42)
        train, test = split["train"], split["test"]
    else:
        test = datasets.load_dataset("json", data_files=path.replace("train", "test"), split="train", cache_dir=cache)
    shuffled = [list(grain.MapDataset.source(d).shuffle(seed=42)) for d in (train, test)]
    return [[r["uid"] for r in rows if r["expected_answer"]] for rows in shuffled]  # type: ignore[return-value]


def _dataset(folder, **over):  # noqa: ANN001, ANN202
    d = compose_conf(["dataset=jsonl"]).dataset
    d.source, d.prompt_field, d.answer_field, d.id_field = str(folder), "problem", "expected_answer", "uid"
    d.shuffle, d.seed, d.train_size, d.eval_size = "maxtext", 42, -1, -1
    for k, v in over.items():
        setattr(d, k, v)
    return d


def test_holdout_and_order_are_maxtexts(table) -> None:  # noqa: ANN001
    s = load_splits(_dataset(table, eval_fraction=0.05))
    train, test = _maxtext_ids(str(table / "train.jsonl"), holdout=True, cache=str(table.parent / "hf"))
    assert [r["id"] for r in s.eval] == test == ["p32", "p7"]  # pinned: 5 % of 40 rows
    assert [r["id"] for r in s.train] == train
    assert [r["id"] for r in s.train[:5]] == ["p31", "p19", "p28", "p27", "p14"]
    assert s.skipped == {"missing_answer": 1}


def test_eval_split_is_shuffled_and_capped_before_filtering(table) -> None:  # noqa: ANN001
    s = load_splits(_dataset(table, eval_split="test", eval_size=4, train_size=10))
    train, test = _maxtext_ids(str(table / "train.jsonl"), holdout=False, cache=str(table.parent / "hf"))
    assert [r["id"] for r in s.train + s.spare_train] == train and len(s.train) == 10
    assert [r["id"] for r in s.eval] == test[:4]
    assert s.spare_eval == []  # MaxText slices its filtered eval set: no row tops it up


def test_rlexp_order_differs_and_maxtext_needs_a_holdout(table) -> None:  # noqa: ANN001
    assert [r["id"] for r in load_splits(_dataset(table, shuffle="rlexp")).eval] != ["p32", "p7"]
    with pytest.raises(ConfigError, match="dataset.eval_fraction"):
        load_splits(_dataset(table, eval_fraction=0.0))
