"""The builtin tiny model: a real HF-layout checkpoint, rebuilt bit for bit by its script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.numpy import load_file

from rlexp.models.loader import BUILTIN_DIR, load_tokenizer, resolve_model_dir
from tests.helpers import REPO, compose_conf


def test_builtin_folder_is_hf_layout_and_small() -> None:
    folder = resolve_model_dir(compose_conf().model)
    assert folder == BUILTIN_DIR / "tiny"
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert sum(p.stat().st_size for p in folder.iterdir()) < 3_000_000
    hf = json.loads((folder / "config.json").read_text())
    m = compose_conf().model
    assert (hf["num_hidden_layers"], hf["hidden_size"], hf["vocab_size"]) == (m.num_layers, m.embed_dim, m.vocab_size)
    weights = load_file(str(folder / "model.safetensors"))
    assert weights["model.embed_tokens.weight"].shape == (m.vocab_size, m.embed_dim)
    assert sum(w.size for w in weights.values()) == 124_352


def test_tokenizer_round_trip_and_special_ids() -> None:
    tok = load_tokenizer(compose_conf().model)
    assert tok.decode(tok.encode("12+7=19")) == "12+7=19"
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)  # BOS must not be 0 for Tunix


def test_transformers_loads_the_builtin_model() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    folder = resolve_model_dir(compose_conf().model)
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    tok = load_tokenizer(compose_conf().model)
    ids = torch.tensor([[tok.bos_token_id, *tok.encode("3+4=")]])
    assert model(ids).logits.shape == (1, ids.shape[1], tok.vocab_size if hasattr(tok, "vocab_size") else 17)


@pytest.mark.slow
def test_script_is_deterministic(tmp_path: Path) -> None:
    # the two builds run side by side: each is a mostly single-threaded training of a tiny model
    cmd = [sys.executable, "scripts/make_tiny_model.py", "--steps", "2", "--out"]
    procs = [
        subprocess.Popen([*cmd, str(tmp_path / name)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for name in ("a", "b")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
    outs = [(tmp_path / name / "model.safetensors").read_bytes() for name in ("a", "b")]
    assert outs[0] == outs[1]
