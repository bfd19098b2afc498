"""Run-dir files on local disks and object stores (fsspec's in-memory filesystem stands in for gs://)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp import storage
from rlexp.errors import RlexpError
from rlexp.train.rundir import JsonlSink, dotted_get, truncate_jsonl, versions


def test_sink_appends_locally(tmp_path: Path) -> None:
    path = str(tmp_path / "metrics.jsonl")
    sink = JsonlSink(path)
    sink.write(['{"step": 1}\n'])
    sink.write(['{"step": 2}\n'])
    assert Path(path).read_text().splitlines() == ['{"step": 1}', '{"step": 2}']


def test_sink_rewrites_objects_it_cannot_append_to() -> None:
    path = "memory://bucket/run/metrics.jsonl"
    storage.write_text(path, '{"step": 1}\n')  # a resumed run's earlier lines are kept
    sink = JsonlSink(path, min_interval_s=3600)
    sink.write(['{"step": 2}\n'])
    assert storage.read_text(path) == '{"step": 1}\n'  # batched: not rewritten on every step
    sink.close()
    assert [r["step"] for r in storage.read_jsonl(path)] == [1, 2]


def test_truncate_drops_steps_a_resume_redoes(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(6)))
    truncate_jsonl(str(path), 3)
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [0, 1, 2, 3]


def test_missing_filesystem_driver_is_one_line() -> None:
    with pytest.raises(RlexpError, match=r"^nosuchfs://b/x: .*"):
        storage.read_text("nosuchfs://b/x")


def test_versions_and_dotted_keys() -> None:
    v = versions()
    assert v["google-tunix"] == "0.1.7" and v["jax"] == "0.10.2" and v["git_commit"]
    assert dotted_get({"eval": {"after": {"pass_at_1": 0.5}}}, "eval.after.pass_at_1") == 0.5
    assert dotted_get({"eval": {}}, "eval.after.pass_at_1") is None
