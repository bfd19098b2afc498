"""Load a model option: find its Hugging Face-layout folder, build the Tunix module, read the tokenizer.

Every model, the builtin `tiny` included, goes through the same path: a folder with
config.json, *.safetensors and tokenizer files, read by Tunix's safetensors loader of the
model's family. `model.path` may be `builtin:<name>` (shipped inside rlexp) or a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.config.families import check_source
from rlexp.config.schema import ModelConfig
from rlexp.errors import ConfigError

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


def load_model(cfg: ModelConfig, mesh: Any) -> Any:
    """The nnx module with the checkpoint's weights, sharded on `mesh`."""
    folder = resolve_model_dir(cfg)
    from rlexp.models.families import build_model, check_hf_config, read_hf_config

    # config.json must agree with the option (layers, heads, vocab, ...); the error names every mismatch
    check_hf_config(cfg, read_hf_config(str(folder)), str(folder))
    return build_model(cfg, str(folder), mesh)


def load_tokenizer(cfg: ModelConfig) -> Any:
    from rlexp.models.tokenizer import load_tokenizer_dir

    return load_tokenizer_dir(resolve_model_dir(cfg))
