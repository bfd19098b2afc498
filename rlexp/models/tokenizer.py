"""Tokenizers: Hugging Face tokenizers loaded from a model folder, and the character tokenizer of `tiny`.

The character tokenizer is a real `tokenizers` WordLevel model saved as tokenizer.json, so the
builtin model loads through exactly the same `AutoTokenizer` path as a hub checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.errors import RunError

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
# ids 0/1/2: Tunix prepends BOS only when bos_id() is truthy, so BOS must not be 0.
CHAR_VOCAB = [PAD, BOS, EOS, *"0123456789", "+", "-", "=", " "]


def build_char_tokenizer(out_dir: Path, chars: list[str] = CHAR_VOCAB) -> None:
    """Write tokenizer.json + tokenizer_config.json for a character-level tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # without a decoder, decode() joins characters with spaces
    tok.add_special_tokens([PAD, BOS, EOS])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    import json

    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": EOS,
                "pad_token": PAD,
                "unk_token": PAD,
                "add_bos_token": False,
                "add_eos_token": False,
                "model_max_length": 64,
                "clean_up_tokenization_spaces": False,
            },
            indent=2,
        )
        + "\n"
    )


def load_tokenizer_dir(model_dir: str | Path) -> Any:
    """A Hugging Face tokenizer from a local model folder (no network)."""
    import os

    # rlexp takes only tokenizers from transformers: its import-time advice that PyTorch is missing ("models won't
    # be available") does not apply, and was the first line of every `python -m rlexp` without torch
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as err:  # noqa: BLE001 - transformers and tokenizers raise many types for a bad file
        reason = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
        raise RunError(f"{model_dir}: cannot load its tokenizer ({reason}); download the model again") from None
