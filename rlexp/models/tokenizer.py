"""Tokenizers: Hugging Face tokenizers loaded from a model folder, and the character tokenizer of `tiny`.

The character tokenizer is a real `tokenizers` WordLevel model saved as tokenizer.json with a
tokenizer_config.json, a folder `AutoTokenizer` loads like a hub checkpoint's. A folder of exactly that plain
form (the generic `PreTrainedTokenizerFast` class, string special tokens, no chat template, nothing added to
encodings) is served by `JsonTokenizer` straight from `tokenizers`: `import transformers` alone costs 1.3-1.6 s
of every run (its 5.x lazy module reads ~2,900 model files), more than the default run's whole data and model
loading. `tests/models/test_tokenizer.py` checks it encodes, decodes and renders as `AutoTokenizer` does; every
other folder goes through `AutoTokenizer`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlexp.errors import RunError

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
# ids 0/1/2: Tunix prepends BOS only when bos_id() is truthy, so BOS must not be 0.
CHAR_VOCAB = [PAD, BOS, EOS, *"0123456789", "+", "-", "=", " "]
# `tiny_tools`: ChatML and Qwen's tool-call markers as single tokens (<|im_end|> is its EOS), and the characters
# of the calls' JSON
TOOL_MARKERS = ["<|im_start|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
TOOL_VOCAB = [
    PAD,
    BOS,
    "<|im_end|>",
    *TOOL_MARKERS,
    *"0123456789",
    *"+-= \n",
    *'{}[]":,',
    *"abcdefghijklmnopqrstuvwxyz",
]
# `tiny_rg` (experiment=rg_demo): reasoning-gym's <answer> tags as single tokens, and the characters of its
# questions (letters of both cases, the accented ones of its word lists, digits, the punctuation of the demo's
# tasks); any other character is <pad>
RG_MARKERS = ["<answer>", "</answer>"]
RG_VOCAB = [
    PAD,
    BOS,
    EOS,
    *RG_MARKERS,
    *"0123456789",
    *" \n.,:;?!'\"()*+-=/",
    *"abcdefghijklmnopqrstuvwxyz",
    *"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    *"àáâäçèéêëíîïñóôöúûü",
]


def build_char_tokenizer(out_dir: Path, chars: list[str] = CHAR_VOCAB, eos: str = EOS) -> None:
    """Write tokenizer.json + tokenizer_config.json for a character-level tokenizer; entries of `chars` longer
    than a character are added tokens (one token each, kept by decode)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # without a decoder, decode() joins characters with spaces
    tok.add_special_tokens([PAD, BOS, eos])
    markers = [c for c in chars if len(c) > 1 and c not in (PAD, BOS, eos)]
    if markers:
        from tokenizers import AddedToken

        tok.add_tokens([AddedToken(m, normalized=False) for m in markers])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": eos,
                "pad_token": PAD,
                "unk_token": PAD,
                "add_bos_token": False,
                "add_eos_token": False,
                "model_max_length": 64 if chars is CHAR_VOCAB else 256,
                "clean_up_tokenization_spaces": False,
            },
            indent=2,
        )
        + "\n"
    )


# tokenizer_config.json keys whose meaning JsonTokenizer reproduces; a folder with any other key (a chat template,
# added tokens, a model-specific class's options) goes through AutoTokenizer
PLAIN_CONFIG_KEYS = {
    "tokenizer_class",
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
    "add_bos_token",
    "add_eos_token",
    "model_max_length",
    "clean_up_tokenization_spaces",
}
SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")
# files transformers reads besides tokenizer.json and tokenizer_config.json
HF_EXTRA_FILES = ("special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json")


def plain_tokenizer_config(folder: Path) -> dict[str, Any] | None:
    """The folder's tokenizer_config.json when `JsonTokenizer` serves it exactly as `AutoTokenizer` would, else None."""
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return None
    plain = (
        isinstance(config, dict)
        and (folder / "tokenizer.json").is_file()
        and not any((folder / name).exists() for name in HF_EXTRA_FILES)
        and config.get("tokenizer_class") == "PreTrainedTokenizerFast"
        and set(config) <= PLAIN_CONFIG_KEYS
        and all(isinstance(config.get(name), str | None) for name in SPECIAL_NAMES)
        and not any(config.get(k) for k in ("add_bos_token", "add_eos_token", "clean_up_tokenization_spaces"))
    )
    return config if plain else None


class JsonTokenizer:
    """A plain tokenizer.json folder through `tokenizers`, with the Hugging Face tokenizer calls rlexp and Tunix make.

    Same results as `AutoTokenizer` for the folders `plain_tokenizer_config` accepts: `encode` applies the
    tokenizer.json's own post-processor (special tokens added by default), `decode` keeps special tokens unless
    asked, chat templates render in transformers' Jinja settings with the special tokens as variables. Tunix's
    `TokenizerAdapter` takes it through `bos_id`/`eos_id`/`pad_id`.
    """

    chat_template = None  # plain folders ship none: `chat_template=tokenizer` is refused as for AutoTokenizer's

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        from tokenizers import Tokenizer

        self.name_or_path = str(folder)
        self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=False)
        for name in SPECIAL_NAMES:  # bos_token, bos_token_id, ...: fixed by the folder
            token = config.get(name)
            setattr(self, name, token)
            setattr(self, f"{name}_id", None if token is None else self._tok.token_to_id(token))

    def bos_id(self) -> int | None:
        return self.bos_token_id

    def eos_id(self) -> int | None:
        return self.eos_token_id

    def pad_id(self) -> int | None:
        # Tunix's rule for Hugging Face tokenizers without a pad token (Llama 3): pad with EOS
        return self.eos_token_id if self.pad_token_id is None else self.pad_token_id

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def __call__(self, text: str | Sequence[str], add_special_tokens: bool = True) -> dict[str, Any]:
        """`{"input_ids": ...}` for one text or a batch, as a Hugging Face tokenizer called without options."""
        if isinstance(text, str):
            return {"input_ids": self.encode(text, add_special_tokens)}
        encodings = self._tok.encode_batch(list(text), add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encodings]}

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else ids  # numpy and jax arrays
        ids = [ids] if isinstance(ids, int) else list(ids)
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        chat_template: str | None = None,
        tokenize: bool = False,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        """`messages` rendered by `chat_template`, with the special tokens as template variables."""
        if chat_template is None:
            raise ValueError(f"{self.name_or_path}: this tokenizer ships no chat template; pass chat_template=")
        from rlexp.compat.chat_jinja import compiled_chat_template

        special = {name: getattr(self, name) for name in SPECIAL_NAMES}
        text = compiled_chat_template(chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **special, **kwargs
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text


def load_tokenizer_dir(model_dir: str | Path) -> Any:
    """The tokenizer of a local model folder (no network): `JsonTokenizer` for plain folders, else `AutoTokenizer`."""
    config = plain_tokenizer_config(Path(model_dir))
    if config is not None:
        try:
            return JsonTokenizer(Path(model_dir), config)
        except Exception:  # noqa: BLE001 - a broken tokenizer.json: AutoTokenizer's error below names the file
            pass
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
