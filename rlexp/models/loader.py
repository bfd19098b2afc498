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
    if cfg.path:
        folder = Path(cfg.path).expanduser()
        if not folder.is_dir():
            raise ConfigError("model.path", cfg.path, "no such folder; point it at a Hugging Face model folder")
        return folder
    raise ConfigError("model.path", cfg.path, "set model.path to a local model folder")


def _dtype(name: str) -> Any:
    import jax.numpy as jnp

    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[name]


def tunix_config(cfg: ModelConfig) -> Any:
    """The Tunix ModelConfig of the option's family, from its dimensions."""
    if cfg.family != "qwen3":
        raise ConfigError("model.family", cfg.family, "use qwen3")
    from tunix.models.qwen3 import model as qwen3

    remat = qwen3.RematConfig.DECODER if cfg.remat == "full" else qwen3.RematConfig.NONE
    return qwen3.ModelConfig(
        num_layers=cfg.num_layers,
        vocab_size=cfg.vocab_size,
        embed_dim=cfg.embed_dim,
        hidden_dim=cfg.hidden_dim,
        num_heads=cfg.num_heads,
        head_dim=cfg.head_dim,
        num_kv_heads=cfg.num_kv_heads,
        rope_theta=int(cfg.extra.get("rope_theta", 1_000_000)),
        norm_eps=float(cfg.extra.get("norm_eps", 1e-6)),
        use_tied_embedding=bool(cfg.extra.get("tie_word_embeddings", False)),
        remat_config=remat,
        dtype=_dtype(cfg.dtype),
        param_dtype=_dtype(cfg.param_dtype),
    )


def load_model(cfg: ModelConfig, mesh: Any) -> Any:
    """The nnx module with the checkpoint's weights, sharded on `mesh`."""
    folder = resolve_model_dir(cfg)
    from tunix.models.qwen3 import params

    return params.create_model_from_safe_tensors(
        str(folder), tunix_config(cfg), mesh=mesh, dtype=_dtype(cfg.param_dtype)
    )


def load_tokenizer(cfg: ModelConfig) -> Any:
    from rlexp.models.tokenizer import load_tokenizer_dir

    return load_tokenizer_dir(resolve_model_dir(cfg))
