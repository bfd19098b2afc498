"""Load a model option: find its Hugging Face-layout folder, build the Tunix module, read the tokenizer.

Every model, the builtin `tiny` included, goes through the same path: a folder with
config.json, *.safetensors and tokenizer files, read by Tunix's safetensors loader of the
model's family. `model.path` may be `builtin:<name>` (shipped inside rlexp) or a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    if cfg.hf_id:  # config, safetensors and tokenizer only; HF_TOKEN from the environment
        from rlexp.models.hub import download

        return Path(download(cfg.hf_id))
    raise ConfigError("model.path", cfg.path, "set model.path (folder or gs://) or model.hf_id")


def _dtype(name: str) -> Any:
    import jax.numpy as jnp

    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[name]


def tunix_config(cfg: ModelConfig) -> Any:
    """The Tunix ModelConfig of the option's family, from its dimensions."""
    from rlexp.models.families import family_of

    family_of(cfg)  # unknown family -> ConfigError listing the known ones
    if cfg.family in ("llama3", "qwen3"):
        from rlexp.models import tunix_text

        return tunix_text.tunix_config(cfg)  # honours rope_theta and llama3 RoPE scaling
    if cfg.family == "gemma4":
        from rlexp.models import gemma4

        return gemma4.tunix_config(cfg)
    if cfg.family == "gpt_oss":
        from rlexp.models.gpt_oss import params as gpt_oss_params

        return gpt_oss_params.tunix_config(cfg)
    raise AssertionError(cfg.family)  # family_of accepted a family without a builder


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
