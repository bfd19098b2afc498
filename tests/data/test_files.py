"""File and hub datasets: the real GSM8K / OpenMathInstruct-2 layouts, field mapping, skips, sources."""

from __future__ import annotations

import json

import fsspec
import pytest

from rlexp.config.schema import DatasetConfig
from rlexp.data.files import gsm8k_answer
from rlexp.data.registry import load_splits
from rlexp.errors import ConfigError, RlexpError
from tests.helpers import REPO, compose_conf

FIX = REPO / "tests" / "fixtures" / "recipes"


def _dataset(option: str, **over: object) -> DatasetConfig:
    d = compose_conf([f"dataset={option}"]).dataset
    for k, v in over.items():
        setattr(d, k, v)
    return d


def test_gsm8k_folder_answers_after_hashes_and_skips_are_counted() -> None:
    s = load_splits(_dataset("gsm8k", source=str(FIX / "gsm8k")))
    answers = {r["id"]: r["answer"] for r in s.train}
    assert answers == {
        "gsm8k-train-0": "72",
        "gsm8k-train-1": "10",
        "gsm8k-train-2": "5",
        "gsm8k-train-3": "1000",  # "#### 1,000"
        "gsm8k-train-4": "-5",
    }
    assert [r["id"] for r in s.eval] == ["gsm8k-test-0", "gsm8k-test-1"]  # eval keeps file order
    assert s.skipped == {"missing_answer": 1, "unparseable_record": 1}  # no "####"; a broken JSON line
    assert all(r["data_source"] == "gsm8k" and r["question"] for r in s.train)


def test_gsm8k_answer_parser() -> None:
    assert gsm8k_answer("a\n#### 1,234.") == "1234"
    assert gsm8k_answer("no marker") is None
    assert gsm8k_answer("####  ") is None


def test_openmathinstruct2_holdout_is_seeded_and_disjoint(tmp_path) -> None:  # noqa: ANN001
    folder = tmp_path / "omi2" / "data"
    folder.mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [json.loads(line) for line in (FIX / "omi2_train_1M.jsonl").read_text().splitlines()]
    # The hub layout: data/train_1M-0000i-of-00002.parquet; a train_2M shard must not be read.
    pq.write_table(pa.Table.from_pylist(records[:6]), folder / "train_1M-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(records[6:]), folder / "train_1M-00001-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(records[:2]), folder / "train_2M-00000-of-00001.parquet")
    d = _dataset("openmathinstruct2", source=str(tmp_path / "omi2"), eval_fraction=0.2)
    s = load_splits(d)
    assert s.skipped == {"missing_answer": 1}  # the row with an empty expected_answer
    assert (len(s.train), len(s.eval)) == (8, 2)
    assert not {r["id"] for r in s.train} & {r["id"] for r in s.eval}
    by_id = {r["id"]: r for r in s.train + s.eval}
    assert by_id["openmathinstruct2-train_1M-0"]["answer"] == "\\frac{5}{6}"
    assert load_splits(d).eval == s.eval  # same seed, same hold-out
    d.seed = 7
    assert [r["id"] for r in load_splits(d).eval] != [r["id"] for r in s.eval] or len(s.eval) < 2


def test_jsonl_field_mapping_ids_nested_fields_and_chat_prompts(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "mine.jsonl"
    lines = [
        {"uid": "a", "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "1+1?"}],
         "reward_model": {"ground_truth": 2}},
        {"uid": "b", "prompt": "2+2?", "reward_model": {"ground_truth": "4"}},
        {"uid": "a", "prompt": "dup?", "reward_model": {"ground_truth": "1"}},
        {"uid": "c", "prompt": "", "reward_model": {"ground_truth": "1"}},
        {"uid": "d", "prompt": "no answer", "reward_model": {}},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    d = _dataset(
        "jsonl",
        source=str(path),
        prompt_field="prompt",
        answer_field="reward_model.ground_truth",
        id_field="uid",
        data_source="mine",
        eval_fraction=0.0,
    )
    s = load_splits(d)
    assert sorted((r["id"], r["question"], r["answer"], r["data_source"]) for r in s.train) == [
        ("a", "1+1?", "2", "mine"),
        ("b", "2+2?", "4", "mine"),
    ]
    assert s.skipped == {"duplicate_id": 1, "missing_question": 1, "missing_answer": 1}


def test_remote_paths_go_through_fsspec() -> None:
    fs = fsspec.filesystem("memory")
    with fs.open("/bucket/data/train.jsonl", "w") as f:
        f.write(json.dumps({"question": "q1", "answer": "1"}) + "\n" + json.dumps({"question": "q2", "answer": "2"}))
    s = load_splits(_dataset("jsonl", source="memory://bucket/data", split="train", eval_fraction=0.0))
    assert sorted(r["answer"] for r in s.train) == ["1", "2"]


def test_missing_files_and_gcs_without_backend_are_one_line_errors(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError, match="no such file"):
        load_splits(_dataset("jsonl", source=str(tmp_path / "absent.jsonl")))
    (tmp_path / "dir").mkdir()
    with pytest.raises(ConfigError, match="holds no train"):
        load_splits(_dataset("jsonl", source=str(tmp_path / "dir")))


def test_hub_dataset_offline_is_a_clear_error(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RlexpError, match="could not be loaded from the hub or its cache.*local or gs://"):
        load_splits(_dataset("gsm8k", source="rlexp-tests/no-such-dataset"), allow_downloads=False)


def test_arith_still_loads() -> None:
    s = load_splits(compose_conf([]).dataset)
    assert s.train and s.eval and s.train[0]["id"].startswith("arith-train-")


def _templates() -> tuple:
    conf = compose_conf([])
    return conf.data_template, conf.chat_template


class _WordTokenizer:
    def encode(self, text: str) -> list[str]:
        return text.split()


def test_over_long_prompts_are_filtered_before_the_caps(tmp_path) -> None:  # noqa: ANN001
    from rlexp.data.templates import render_splits

    # Every third question is too long for a 5-token budget.
    lines = [{"question": " ".join(["w"] * (30 if i % 3 == 0 else 2)), "answer": str(i)} for i in range(60)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    d = _dataset("jsonl", source=str(tmp_path / "d.jsonl"), train_size=20, eval_size=4, eval_fraction=0.2)
    loaded = load_splits(d)
    assert (len(loaded.train), len(loaded.eval)) == (20, 4)  # capped, not yet filtered
    s = render_splits(loaded, *_templates(), _WordTokenizer(), max_prompt_tokens=5)
    assert (len(s.train), len(s.eval)) == (20, 4)  # the caps count rows that survive the filter
    assert all(len(r["prompt"].split()) <= 5 for r in s.train + s.eval)
    short = [r["id"] for r in loaded.train + loaded.spare_train if len(r["question"].split()) <= 5]
    assert [r["id"] for r in s.train] == short[:20]  # the same rows as filtering everything, then capping

    def long_before_cap(rows: list[dict], cap: int) -> int:  # over-long rows met until `cap` rows fit
        lengths = [len(r["question"].split()) for r in rows]
        last = [i for i, n in enumerate(lengths) if n <= 5][cap - 1]
        return sum(n > 5 for n in lengths[: last + 1])

    expected = long_before_cap(loaded.train + loaded.spare_train, 20) + long_before_cap(
        loaded.eval + loaded.spare_eval, 4
    )
    assert s.skipped == {"prompt_too_long": expected} and expected > 0
    assert not {r["id"] for r in s.train} & {r["id"] for r in s.eval}  # spares never cross splits
    unfiltered = render_splits(loaded, *_templates())  # no tokenizer: no filter, same caps
    assert [r["id"] for r in unfiltered.train] == [r["id"] for r in loaded.train]
    # Fewer usable rows than the cap: every one that fits, and the count says how many.
    d.train_size = 45
    s = render_splits(load_splits(d), *_templates(), _WordTokenizer(), max_prompt_tokens=5)
    assert len(s.train) == len(short) < 45


def test_a_row_over_the_size_limit_is_skipped_unread(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from rlexp.data import sources

    monkeypatch.setattr(sources, "MAX_ROW_BYTES", 1000)
    rows = [{"question": "x" * 5000, "answer": "1"}, {"question": "1+1=", "answer": "2"}, {"q": 1}]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    got = list(sources.read_records(str(path), "train"))
    assert [w for w, _ in got] == [f"{path}:{n}" for n in (1, 2, 3, 4)]
    assert got[0][1] == {"__oversized__": f"{path}:1"} and got[1][1] == rows[1]
    assert got[3][1] == {"__unparseable__": f"{path}:4"}


def test_a_row_holding_a_list_id_names_its_line_and_a_list_answer_stays_text(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"id": "a", "question": "a", "answer": ["t1"]}\n\n{"id": {"x": 1}, "question": "b", "answer": "1"}\n'
    )
    cfg = _dataset("jsonl", source=str(path), eval_fraction=0.0, id_field="id")
    with pytest.raises(RlexpError, match=rf"{path}:3: id holds a dict"):
        load_splits(cfg)
    path.write_text('{"id": "a", "question": "a", "answer": ["t1"]}\n')  # reward=code_tests' tests: a list
    assert load_splits(cfg).train[0]["answer"] == "['t1']"
