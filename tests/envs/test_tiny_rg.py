"""The builtin `tiny_rg` model (experiment=rg_demo): its tokenizer covers every character of the demo's rows and
keeps reasoning-gym's <answer> tags as single tokens; scripts/make_tiny_model.py rebuilds it byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlexp import envs
from rlexp.models.loader import BUILTIN_DIR
from rlexp.models.tokenizer import load_tokenizer_dir
from tests.helpers import REPO, compose_conf, rlexp_env


def test_tokenizer_covers_the_demo_rows_and_keeps_the_tags_whole() -> None:
    tok = load_tokenizer_dir(BUILTIN_DIR / "tiny_rg")
    rows = envs.load_rows(envs.resolve(compose_conf(["experiment=rg_demo"])))
    pad = tok.pad_token_id
    for row in [*rows.train, *rows.eval]:
        ids = tok.encode(row["question"], add_special_tokens=False)
        assert pad not in ids and tok.decode(ids) == row["question"], row["question"]
    text = "<answer>42</answer>"
    assert len(tok.encode(text, add_special_tokens=False)) == 4 and tok.decode(tok.encode(text)) == text


@pytest.mark.slow
def test_script_rebuilds_tiny_rg_deterministically(tmp_path: Path) -> None:
    procs = []
    for name in ("a", "b"):
        cmd = [sys.executable, "scripts/make_tiny_model.py", "--model", "tiny_rg", "--steps", "2"]
        cmd += ["--out", str(tmp_path / name), "env.train_size=48"]
        procs.append(
            subprocess.Popen(
                cmd, cwd=REPO, env=rlexp_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        )
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (tmp_path / "a" / name).read_text() == (BUILTIN_DIR / "tiny_rg" / name).read_text(), name
