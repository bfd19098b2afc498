"""The builtin `tiny_tools` model: rebuilt by scripts/make_tiny_model.py deterministically, with the shipped
tokenizer and config; its tokenizer keeps the tool-call markers as single tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp.models.loader import BUILTIN_DIR
from rlexp.models.tokenizer import load_tokenizer_dir
from tests.envs.tiny_builds import build_twice


def test_markers_are_single_tokens_and_decode_back() -> None:
    tok = load_tokenizer_dir(BUILTIN_DIR / "tiny_tools")
    text = '<|im_start|>assistant\n<tool_call>{"name":"calculator"}</tool_call><|im_end|>'
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    for marker in ("<|im_start|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        assert len(tok.encode(marker, add_special_tokens=False)) == 1
    assert tok.eos_token == "<|im_end|>"


@pytest.mark.slow
def test_script_rebuilds_tiny_tools_deterministically(tmp_path: Path) -> None:
    a, b = build_twice("tiny_tools", tmp_path, "dataset.train_size=64")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (a / name).read_text() == (BUILTIN_DIR / "tiny_tools" / name).read_text(), name
