"""The builtin `tiny_rg` model (experiment=rg_demo): its tokenizer covers every character of the demo's rows and
keeps reasoning-gym's <answer> tags as single tokens; scripts/make_tiny_model.py rebuilds it byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp import envs
from rlexp.models.loader import BUILTIN_DIR
from rlexp.models.tokenizer import load_tokenizer_dir
from tests.envs.tiny_builds import build_twice
from tests.helpers import compose_conf


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
    a, b = build_twice("tiny_rg", tmp_path, "env.train_size=48")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (a / name).read_text() == (BUILTIN_DIR / "tiny_rg" / name).read_text(), name
