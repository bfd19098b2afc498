"""Inputs for the bad-input table: broken files, damaged model folders, a port in use, one trained run dir."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, run_rlexp

TINY = REPO / "rlexp" / "models" / "builtin" / "tiny"
# The shortest run that leaves every record a run dir has: .hydra/, config.yaml, checkpoints, summary.
TRAIN = [
    "trainer.max_steps=3",
    "trainer.eval_every=3",
    "trainer.checkpoint_every=3",
    "trainer.eval_prompts=16",
    "trainer.eval_samples=2",
    "logger=none",
]


@pytest.fixture(scope="session")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bad_files")
    (d / "empty.jsonl").write_text("\n\n")
    (d / "corrupt.jsonl").write_text('{"id": "1", "completion": "2"}\n{"id": "2", "compl\n')
    (d / "binary.jsonl").write_bytes(b'{"id": "1", "completion": "\xff\xfe"}\n')
    (d / "noid.jsonl").write_text('{"completion": "4"}\n')
    item = '{"id": "q%d", "prompt": "1+1=", "answer": "2", "completion": "2"}\n'
    (d / "scored.jsonl").write_text("".join(item % i for i in range(4)))
    (d / "rewards.py").write_text(
        "def as_text(prompts, completions, **fields):\n    return ['high'] * len(completions)\n"
        "def huge(prompts, completions, **fields):\n    return [1e30] * len(completions)\n"
        "def scalar(prompts, completions, **fields):\n    return 1.0\n"
        "def boom(prompts, completions, **fields):\n    raise ValueError('no score for this')\n"
        "def nothing(prompts, completions, **fields):\n    return None\n"
        "def as_dict(prompts, completions, **fields):\n    return {'score': 1.0}\n"
        "def forever(prompts, completions, **fields):\n    import time\n    time.sleep(3600)\n"
    )
    (d / "unparsable.py").write_text("def f(:\n")
    for name, data in (("badlauncher", b'{"launcher": "gke", "handle": '), ("binlauncher", b"\x89PNG\r\n\x1a\n\x00")):
        (d / name).mkdir()
        (d / name / "launcher.json").write_bytes(data)
    (d / "dryrun").mkdir()  # what hydra.launcher.dry_run=true leaves: a record of a JobSet never submitted
    (d / "dryrun" / "launcher.json").write_text(
        json.dumps({"launcher": "gke", "handle": "dry-job", "state": "dry-run"})
    )
    (d / "nolauncher").mkdir()
    (d / "nolauncher" / "summary.json").write_text("{}")
    run = d / "binary_run"
    run.mkdir()
    (run / "summary.json").write_text('{"status": "completed", "eval": {"after": {"pass_at_1": 0.5}}}')
    (run / "metrics.jsonl").write_bytes(b'{"step": 1, "loss": 0.5}\n\x00\xff\xfe\x00garbage\n')
    rows = "".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(40))
    (d / "rows.jsonl").write_text(rows)
    (d / "latin1.jsonl").write_bytes(rows.encode() + '{"question": "caf\xe9", "answer": "1"}\n'.encode("latin-1"))
    (d / "rows.csv").write_text("question,answer\n1+1=,2\n")
    ids = "".join(json.dumps({"id": f"r{i}", "question": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(40))
    (d / "list_id.jsonl").write_text(ids + '{"id": ["r40"], "question": "1+1=", "answer": "2"}\n')
    (d / "list_summary").mkdir()
    (d / "list_summary" / "summary.json").write_text("[1, 2]")
    (d / "emptydir").mkdir()
    (d / "adir").mkdir()
    (d / "afile").write_text("not a folder\n")
    return d


@pytest.fixture(scope="session")
def bad_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Copies of the builtin tiny model, each damaged one way."""
    d = tmp_path_factory.mktemp("bad_models")
    weights = (TINY / "model.safetensors").read_bytes()
    damage = {
        "trunc_st": lambda m: (m / "model.safetensors").write_bytes(weights[:1000]),
        "garbage_st": lambda m: (m / "model.safetensors").write_bytes(bytes(range(256)) * 16),
        "short_st": lambda m: (m / "model.safetensors").write_bytes(weights[:-4096]),
        "trunc_cfg": lambda m: (m / "config.json").write_text((TINY / "config.json").read_text()[:100]),
        "bad_tok": lambda m: (m / "tokenizer.json").write_text('{"version": '),
        "no_weights": lambda m: (m / "model.safetensors").unlink(),
        "wrong_layers": lambda m: (m / "config.json").write_text(
            (TINY / "config.json").read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3')
        ),
    }
    for name, fn in damage.items():
        shutil.copytree(TINY, d / name)
        fn(d / name)
    return d


@pytest.fixture(scope="session")
def busy_port() -> Iterator[int]:
    """A port something listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture(scope="session")
def closed_port() -> int:
    """A port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished 3-step run of the tiny default, shared by every case that must leave a run dir as it was."""
    run = tmp_path_factory.mktemp("trained") / "run"
    run_rlexp(*TRAIN, f"hydra.run.dir={run}", cwd=run.parent, check=True)
    assert (run / "checkpoints" / "actor" / "3").is_dir() and (run / ".hydra" / "config.yaml").is_file()
    return run


@pytest.fixture(scope="session")
def damaged_run(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the trained run whose only checkpoint lost the end of a data file, and whose recorded
    config of a second copy is not YAML."""
    run = tmp_path_factory.mktemp("damaged") / "run"
    shutil.copytree(trained_run, run)
    data = max((run / "checkpoints/actor/3/model_params").rglob("d/*"), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:200])
    bad_config = run.parent / "bad_config"
    shutil.copytree(trained_run, bad_config)
    (bad_config / ".hydra" / "config.yaml").write_text("model: [unclosed\n")
    return run


@pytest.fixture(scope="session")
def stale_run(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two copies of the trained run given a newer checkpoint 6 (a copy of its step 3), damaged while step 3 is whole:
    `cut` (step 6's largest data file lost its end) and `lost` (a file of step 6 is gone). A copied step stands for
    a later save, as in test_failure_paths, without training a second run (~5 CPU-s)."""
    root = tmp_path_factory.mktemp("stale")
    for how in ("cut", "lost"):
        run = root / how
        shutil.copytree(trained_run, run)
        actor = run / "checkpoints" / "actor"
        shutil.copytree(actor / "3", actor / "6")
        data = max((actor / "6" / "model_params").rglob("d/*"), key=lambda p: p.stat().st_size)
        if how == "cut":
            data.write_bytes(data.read_bytes()[:200])
        else:
            data.unlink()
    return root
