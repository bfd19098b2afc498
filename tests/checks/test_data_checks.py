"""The data checks before a run: the turn-marker guard in training, the launch preflight naming what it could
not run, prompt lengths filtered with the tokenizer at hand, and `rlexp.validate` loading a reachable hub dataset.

Each goes through the user's command (`python -m rlexp`, `python -m rlexp.validate`): as a subprocess for
training, in-process where the hub client is replaced by a recorder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlexp.checks.data_preflight import preflight
from tests.helpers import REPO, compose_conf, run_rlexp
from tests.launch.conftest import run_cli

FIX = REPO / "tests" / "fixtures" / "recipes"
SEED_TEMPLATE = "<start_of_turn>user\\n{system_prompt}\\n\\n{question}<end_of_turn>\\n<start_of_turn>model"


def _status(result: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in result["checks"]}


@pytest.mark.slow
def test_training_refuses_doubled_markers_before_loading_weights(tmp_path: Path) -> None:
    # A model folder whose safetensors hold no usable weight: loading it fails ("weights do not fit"), so the
    # template error proves the guard ran before any weights were read.
    import shutil

    from safetensors.numpy import save_file

    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(REPO / "rlexp" / "models" / "builtin" / "tiny" / name, model / name)
    save_file({"unused": np.zeros(1, np.float32)}, str(model / "model.safetensors"))
    common = ["trainer.max_steps=2", "trainer.eval_every=2", "trainer.checkpoint_every=2", "logger=none"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return run_rlexp(*common, f"model.path={model}", *args, timeout=300)

    bad = run(
        "chat_template=chatml",
        "data_template.template='<|im_start|>user\\n{question}'",  # the seeds' bug: markers in the data template
        f"hydra.run.dir={tmp_path / 'bad'}",
    )
    err = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and [line for line in err if line.startswith("rlexp: error:")] == [err[-1]], err
    assert "with chat_template=chatml the prompts are malformed" in err[-1] and "'<|im_start|>'" in err[-1]
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()
    good = run(f"hydra.run.dir={tmp_path / 'good'}")  # the same folder with a clean template reaches the weights
    assert good.returncode != 0 and "weights do not fit" in good.stderr.strip().splitlines()[-1]


def test_launch_preflight_names_the_checks_it_could_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # nothing cached: the hub dataset is not here
    monkeypatch.delenv("KUBECONFIG", raising=False)
    run_dir = tmp_path / "run"
    assert (
        run_cli(monkeypatch, "experiment=gemma4_e4b_omi2", "hydra.launcher.dry_run=true", f"hydra.run.dir={run_dir}")
        == 0
    )
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "could not run" in x]
    for name in ("dataset: nvidia/OpenMathInstruct-2", "prompt_lengths", "steps_fit_data", "turn_markers", "rewards"):
        assert name in line, name
    status = _status(json.loads((run_dir / "validation.json").read_text()))
    assert {k: v for k, v in status.items() if v == "skipped"}.keys() >= {"dataset", "turn_markers", "rewards"}


def test_launch_refuses_doubled_markers_in_local_data_without_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    over = [
        "experiment=gemma4_e4b_omi2",
        f"dataset.source={FIX / 'omi2_train_1M.jsonl'}",
        "trainer.batch_size=2",
        "trainer.micro_batch_size=1",
        "trainer.rollout_micro_batch_size=2",
        "trainer.max_steps=4",
        f"data_template.template='{SEED_TEMPLATE}'",
        "hydra.launcher.dry_run=true",
        f"hydra.run.dir={tmp_path}",
    ]
    assert run_cli(monkeypatch, *over) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "preflight failed (turn_markers:" in err and "<start_of_turn>" in err
    assert not (tmp_path / "jobset.yaml").exists()


@pytest.mark.slow
def test_preflight_counts_train_rows_after_the_length_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    rows = [{"question": "1+" * 12 + "1=" if i % 2 else f"{i % 9}+1=", "answer": "13" if i % 2 else str(i % 9 + 1)}
            for i in range(40)]  # fmt: skip
    source = tmp_path / "arith.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    over = ["dataset=jsonl", f"dataset.source={source}", "dataset.train_size=-1", "dataset.eval_size=-1",
            "dataset.eval_fraction=0.1", "trainer.max_steps=3"]  # fmt: skip
    # the builtin tiny model: its tokenizer is here, so 16-token prompts are counted as training counts them
    result = preflight(compose_conf(over), str(tmp_path / "a"), allow_downloads=False)
    status = _status(result)
    assert status["tokenizer"] == "ok" and status["prompt_lengths"] == "ok" and status["turn_markers"] == "ok"
    assert result["dataset"]["skipped"]["prompt_too_long"] >= 15 and result["dataset"]["train_rows"] <= 21
    steps = next(c for c in result["checks"] if c["name"] == "steps_fit_data")
    assert steps["status"] == "failed" and "gives only 2 steps" in steps["detail"]  # 36 raw rows would give 4
    # a hub model whose tokenizer is not cached: the filter cannot run, and the result says so
    result = preflight(compose_conf([*over, "model=qwen3_0_6b"]), str(tmp_path / "b"), allow_downloads=False)
    status = _status(result)
    assert status["prompt_lengths"] == "skipped" and status["steps_fit_data"] == "ok" and "tokenizer" not in status
    assert "rewards" in result["skipped"][-1] and status["completions"] == "skipped"


def _hub(monkeypatch: pytest.MonkeyPatch, calls: list) -> None:
    """`datasets.load_dataset` answering like the hub: rows when online, nothing cached when offline."""
    import datasets

    def load_dataset(path: str, name: str | None = None, split: str | None = None, **kw: object) -> list:
        offline = datasets.config.HF_HUB_OFFLINE
        calls.append((path, name, split, offline))
        if offline:
            raise ConnectionError(f"Couldn't reach '{path}' on the Hub (OfflineModeIsEnabled)")
        return [{"question": f"What is {i}+{i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"} for i in range(12)]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


# `python -m rlexp.validate` in a subprocess whose hub answers like `_hub` and records the calls it gets.
HUB_DRIVER = """
import json, runpy, sys
import datasets

RECORD = sys.argv[1]

def load_dataset(path, name=None, split=None, **kw):
    with open(RECORD, "a") as f:
        f.write(json.dumps([path, name, split, bool(datasets.config.HF_HUB_OFFLINE)]) + "\\n")
    return [{"question": f"What is {i}+{i}?", "answer": f"{i}+{i}={2 * i}\\n#### {2 * i}"} for i in range(12)]

datasets.load_dataset = load_dataset
sys.argv = ["rlexp.validate", *sys.argv[2:]]
runpy.run_module("rlexp.validate", run_name="__main__")
"""


def test_validate_loads_a_reachable_hub_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    completions = tmp_path / "c.jsonl"
    completions.write_text("".join(json.dumps({"id": f"gsm8k-test-{i}", "completion": f"\\boxed{{{2 * i}}}"}) + "\n"
                                   for i in range(4)))  # fmt: skip
    over = ["dataset=gsm8k", "dataset.source=someone/gsm8k-copy", "dataset.train_size=8", "dataset.eval_size=4", "trainer.max_steps=1", "trainer.eval_prompts=4",
            "reward=math", f"validate.completions={completions}", f"hydra.run.dir={tmp_path / 'v'}"]  # fmt: skip
    record = tmp_path / "hub_calls.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", HUB_DRIVER, str(record), *over], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls = [tuple(json.loads(line)) for line in record.read_text().splitlines()]
    assert calls == [("someone/gsm8k-copy", "main", "train", False), ("someone/gsm8k-copy", "main", "test", False)]
    result = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert _status(result)["dataset"] == "ok" and result["dataset"]["train_rows"] == 8
    assert [r["rewards"]["math"] for r in result["rows"]] == [1.0] * 4
    assert "rlexp: cost estimate for tiny on cpu" in proc.stdout and "rlexp: preflight passed" in proc.stdout
    calls: list = []
    _hub(monkeypatch, calls)
    # the launch preflight downloads nothing: the same source is skipped there, and said so
    calls.clear()
    offline = preflight(compose_conf(over[:-2]), str(tmp_path / "o"), allow_downloads=False)
    assert calls and all(c[3] for c in calls) and _status(offline)["dataset"] == "skipped"
