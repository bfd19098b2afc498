"""File and hub datasets: GSM8K, OpenMathInstruct-2 and the user's own jsonl/parquet files.

All of them are one table loader with a field mapping (`dataset.prompt_field`,
`answer_field`, `id_field`, `data_source`) and an answer parser. Every record becomes a
row {id, question, answer, data_source} or a counted skip reason; nothing unparseable is
trained on. Without an eval split or eval file, `eval_fraction` of the train split is held
out with `dataset.seed` (the seeds' OpenMathInstruct-2 recipe: 5 %, seed 42). The size caps
keep the rows past them as spares, so prompts too long for the model are filtered before the
cap is applied (rlexp.data.templates.render_splits).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rlexp.config.schema import DatasetConfig
from rlexp.data.registry import Row, Splits, allow_downloads, register
from rlexp.data.sources import read_records
from rlexp.errors import ConfigError, RunError

AnswerParser = Callable[[Any], str | None]


def plain_answer(value: Any) -> str | None:
    """A ground-truth answer as text; None when it is empty."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    return text or None


def gsm8k_answer(value: Any) -> str | None:
    """GSM8K's final answer: the text after the last `####`, without thousands separators."""
    if not isinstance(value, str) or "####" not in value:
        return None
    final = value.rsplit("####", 1)[1].strip().replace(",", "").rstrip(".")
    return final or None


def _get(record: dict[str, Any], dotted: str) -> Any:
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _question(value: Any) -> str | None:
    """The task text; a chat message list (verl/TRL style) contributes its last user turn."""
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        users = [m.get("content") for m in value if m.get("role") == "user"]
        value = users[-1] if users else None
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()


def _scalar(value: Any, where: str, key: str, field_name: str) -> None:
    """A row's id is text or a number: a list or mapping would name the row by its repr."""
    if isinstance(value, list | dict):
        raise RunError(
            f"{where}: {field_name} holds a {type(value).__name__} ({json.dumps(value)[:60]}); give a string or "
            f"number per row, or point {key} at a field that holds one"
        )


def build_rows(
    records: Iterable[tuple[str, dict[str, Any]]],
    cfg: DatasetConfig,
    split: str,
    parse_answer: AnswerParser,
    skipped: Counter,
    order: Sequence[int] | None = None,
) -> list[Row]:
    """Map records to rows; every record that cannot become a row adds one to `skipped[reason]`. `order`: the
    indices of a record list to take, in that order (ids keep each record's index in the file)."""
    rows: list[Row] = []
    seen: set[str] = set()
    source_label = cfg.data_source or cfg.name
    pairs = enumerate(records) if order is None else ((i, records[i]) for i in order)  # type: ignore[index]
    for index, (where, record) in pairs:
        if isinstance(record, dict) and "__oversized__" in record:
            skipped["oversized_record"] += 1
            continue
        if not isinstance(record, dict) or "__unparseable__" in record:
            skipped["unparseable_record"] += 1
            continue
        question = _question(_get(record, cfg.prompt_field))
        if question is None:
            skipped["missing_question"] += 1
            continue
        answer = parse_answer(_get(record, cfg.answer_field))  # a list stays its text: reward=code_tests' tests
        if answer is None:
            skipped["missing_answer"] += 1
            continue
        row_id = _get(record, cfg.id_field) if cfg.id_field else f"{cfg.name}-{split}-{index}"
        _scalar(row_id, where, "dataset.id_field", cfg.id_field or "id")
        if row_id is None or str(row_id) in seen:
            skipped["missing_id" if row_id is None else "duplicate_id"] += 1
            continue
        seen.add(str(row_id))
        rows.append({"id": str(row_id), "question": question, "answer": answer, "data_source": source_label})
    return rows


def _cap(rows: list[Row], size: int) -> tuple[list[Row], list[Row]]:
    """(the first `size` rows, the rest); size < 0 keeps all."""
    return (rows, []) if size < 0 else (rows[:size], rows[size:])


def load_table(cfg: DatasetConfig, parse_answer: AnswerParser = plain_answer) -> Splits:
    """Train and eval rows of a file or hub dataset, shuffled with `dataset.seed` and capped to the sizes."""
    if not cfg.source:
        raise ConfigError("dataset.source", cfg.source, "set a local path, a gs:// path or a hub dataset id")
    if not 0 <= cfg.eval_fraction < 1:
        raise ConfigError("dataset.eval_fraction", cfg.eval_fraction, "use a fraction in [0, 1)")
    columns = [f.split(".", 1)[0] for f in (cfg.prompt_field, cfg.answer_field, cfg.id_field) if f]
    opts = {"fmt": cfg.format, "subset": cfg.subset, "columns": columns, "allow_downloads": allow_downloads()}
    skipped: Counter = Counter()
    if cfg.shuffle == "maxtext":
        return _maxtext_splits(cfg, parse_answer, opts, skipped)
    train = build_rows(read_records(cfg.source, cfg.split, **opts), cfg, cfg.split, parse_answer, skipped)
    rng = random.Random(cfg.seed)
    if cfg.eval_split or cfg.eval_source:
        eval_split = cfg.eval_split or "test"
        records = read_records(cfg.eval_source or cfg.source, eval_split, key="dataset.eval_source", **opts)
        evals = build_rows(records, cfg, eval_split, parse_answer, skipped)
        rng.shuffle(train)
    else:
        rng.shuffle(train)
        n_eval = round(len(train) * cfg.eval_fraction)
        evals, train = train[:n_eval], train[n_eval:]
    if not train:
        raise ConfigError("dataset.source", cfg.source, f"no usable train rows (skipped: {dict(skipped) or 'none'})")
    (train, spare_train), (evals, spare_eval) = _cap(train, cfg.train_size), _cap(evals, cfg.eval_size)
    return Splits(train, evals, dict(skipped), spare_train=spare_train, spare_eval=spare_eval)


def grain_order(n: int, seed: int) -> list[int]:
    """The order grain's `MapDataset.shuffle(seed)` gives n rows (MaxText's data_shuffle_seed shuffle)."""
    import grain

    return [int(i) for i in grain.MapDataset.source(list(range(n))).shuffle(seed=seed)]


def hf_holdout(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, test) row indices of Hugging Face datasets' `train_test_split(test_size=fraction, seed=seed)` on n
    rows: the split depends on the row count and the seed only, so indices stand in for the records."""
    import datasets

    table = datasets.Dataset.from_dict({"i": list(range(n))})
    split = table.train_test_split(test_size=fraction, seed=seed)
    return [int(i) for i in split["train"]["i"]], [int(i) for i in split["test"]["i"]]


def _maxtext_splits(cfg: DatasetConfig, parse_answer: AnswerParser, opts: dict[str, Any], skipped: Counter) -> Splits:
    """dataset.shuffle=maxtext: MaxText 0.2.5's selection, with its own libraries. Without an eval split,
    `eval_fraction` is held out by `datasets`' train_test_split; each split is then shuffled by grain. The eval
    cap is taken before the prompt-length filter (MaxText slices its filtered dataset: no spare rows); the train
    cap after it, so the rows MaxText trains on come first, in its order, and a run still gets its steps."""
    records = list(read_records(cfg.source, cfg.split, **opts))
    if cfg.eval_split or cfg.eval_source:
        eval_split = cfg.eval_split or "test"
        eval_records = list(read_records(cfg.eval_source or cfg.source, eval_split, key="dataset.eval_source", **opts))
        train_idx, eval_idx = list(range(len(records))), list(range(len(eval_records)))
    else:
        if not 0 < cfg.eval_fraction < 1:
            raise ConfigError("dataset.eval_fraction", cfg.eval_fraction, "use a fraction in (0, 1) to hold out")
        eval_split, eval_records = cfg.split, records
        train_idx, eval_idx = hf_holdout(len(records), cfg.eval_fraction, cfg.seed)
    train_order = [train_idx[j] for j in grain_order(len(train_idx), cfg.seed)]
    eval_order = [eval_idx[j] for j in grain_order(len(eval_idx), cfg.seed)]
    train = build_rows(records, cfg, cfg.split, parse_answer, skipped, order=train_order)
    evals = build_rows(eval_records, cfg, eval_split, parse_answer, skipped, order=_cap(eval_order, cfg.eval_size)[0])
    if not train:
        raise ConfigError("dataset.source", cfg.source, f"no usable train rows (skipped: {dict(skipped) or 'none'})")
    train, spare_train = _cap(train, cfg.train_size)  # train: filter first, then cap (the step check counts it)
    return Splits(train, evals, dict(skipped), spare_train=spare_train)


@register("jsonl")
def load_jsonl(cfg: DatasetConfig) -> Splits:
    return load_table(cfg)


@register("parquet")
def load_parquet(cfg: DatasetConfig) -> Splits:
    return load_table(cfg)


@register("gsm8k")
def load_gsm8k(cfg: DatasetConfig) -> Splits:
    return load_table(cfg, gsm8k_answer)


@register("openmathinstruct2")
def load_openmathinstruct2(cfg: DatasetConfig) -> Splits:
    return load_table(cfg)
