"""A model option's folder and tokenizer: find its Hugging Face-layout folder, read the tokenizer.

Every model, the builtin `tiny` included, goes through the same path: a folder with
config.json, *.safetensors and tokenizer files; `rlexp.families.load` checks config.json and builds the model
through its family's spec. `model.path` may be `builtin:<name>` (shipped inside rlexp) or a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.config.model_rules import check_source
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


def load_tokenizer(cfg: ModelConfig) -> Any:
    from rlexp.models.tokenizer import load_tokenizer_dir

    return load_tokenizer_dir(resolve_model_dir(cfg))


def local_tokenizer(cfg: ModelConfig) -> Any:
    """The model's tokenizer when this machine has it without downloading (a local folder, or the hub cache);
    None otherwise. A local folder that is not whole fails as `load_tokenizer` does."""
    if cfg.path and "://" not in cfg.path:
        return load_tokenizer(cfg)
    if cfg.path or not cfg.hf_id:
        return None
    from huggingface_hub import snapshot_download

    from rlexp.models.hub import CONFIG_AND_TOKENIZER_FILES
    from rlexp.models.tokenizer import load_tokenizer_dir

    try:
        folder = snapshot_download(cfg.hf_id, allow_patterns=list(CONFIG_AND_TOKENIZER_FILES), local_files_only=True)
    except Exception:  # noqa: BLE001 - not in the cache (huggingface_hub raises several types for that)
        return None
    return load_tokenizer_dir(folder)
