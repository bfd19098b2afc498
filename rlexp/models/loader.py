"""Load a model option: find its Hugging Face-layout folder, build the Tunix module, read the tokenizer.

Every model, the builtin `tiny` included, goes through the same path: a folder with
config.json, *.safetensors and tokenizer files, read by Tunix's safetensors loader of the
model's family. `model.path` may be `builtin:<name>` (shipped inside rlexp) or a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlexp.config.family_rules import check_source
from rlexp.config.schema import ModelConfig
from rlexp.errors import ConfigError, RunError

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


def resolve_model_dir(cfg: ModelConfig) -> Path:
    """The local folder holding the checkpoint of `cfg`."""
    if cfg.path and cfg.path.startswith("builtin:"):
        name = cfg.path.split(":", 1)[1]
        folder = BUILTIN_DIR / name
        if not folder.is_dir():
            known = sorted(p.name for p in BUILTIN_DIR.iterdir() if p.is_dir())
            raise ConfigError("model.path", cfg.path, f"builtin models are {', '.join('builtin:' + k for k in known)}")
        return folder
    if cfg.path and "://" in cfg.path:  # gs://: copied once into the local cache
        from rlexp.models.checkpoint import local_copy

        return Path(local_copy(cfg.path))
    if cfg.path:
        folder = Path(cfg.path).expanduser()
        if not folder.is_dir():
            raise ConfigError("model.path", cfg.path, "no such folder; point it at a Hugging Face model folder")
        return folder
    check_source(cfg)
    from rlexp.models.hub import download  # config, safetensors and tokenizer only; HF_TOKEN from the environment

    return Path(download(cfg.hf_id))


def check_model_dir(cfg: ModelConfig) -> None:
    """A model folder on this machine (builtin or a local path): config.json agrees with the option and
    every safetensors file is whole. Pure Python, so the entry point runs it before JAX is imported;
    hub and gs:// models are checked once downloaded."""
    if not cfg.path or "://" in cfg.path:
        return
    from rlexp.models.checkpoint import safetensors_files
    from rlexp.models.hf_config import check_hf_config, read_hf_config

    folder = str(resolve_model_dir(cfg))
    check_hf_config(cfg, read_hf_config(folder), folder)
    safetensors_files(folder)
    tokenizer = Path(folder) / "tokenizer.json"
    if tokenizer.is_file():
        try:
            json.loads(tokenizer.read_bytes())
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            raise RunError(f"{tokenizer}: not a readable tokenizer.json; download the model again") from None


def load_model(cfg: ModelConfig, mesh: Any) -> Any:
    """The nnx module with the checkpoint's weights, sharded on `mesh`."""
    folder = resolve_model_dir(cfg)
    from rlexp.models.builders import build_model
    from rlexp.models.hf_config import check_hf_config, read_hf_config

    # config.json must agree with the option (layers, heads, vocab, ...); the error names every mismatch
    check_hf_config(cfg, read_hf_config(str(folder)), str(folder))
    return build_model(cfg, str(folder), mesh)


def load_tokenizer(cfg: ModelConfig) -> Any:
    from rlexp.models.tokenizer import load_tokenizer_dir

    return load_tokenizer_dir(resolve_model_dir(cfg))
