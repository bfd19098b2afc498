"""A model option loaded through its family: the folder's config.json checked against the option, then the
family's builder (`FamilySpec.build`). Pure Python at import time; a builder imports JAX and Tunix when it runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlexp.config.schema import ModelConfig
from rlexp.errors import RunError
from rlexp.families.hf_config import check_hf_config, read_hf_config
from rlexp.families.registry import family_of
from rlexp.models.loader import resolve_model_dir


def build_model(m: ModelConfig, ckpt_dir: str, mesh: Any = None) -> Any:
    """Create the family's nnx model with the checkpoint's weights (local folder or gs://)."""
    return family_of(m).build(m, ckpt_dir, mesh)


def tunix_config(m: ModelConfig) -> Any:
    """The Tunix ModelConfig of the option's family, from its dimensions (rlexp's RoPE fixes included)."""
    return family_of(m).tunix_config(m)


def check_model_dir(cfg: ModelConfig) -> None:
    """A model folder on this machine (builtin or a local path): config.json agrees with the option and
    every safetensors file is whole. Pure Python, so the entry point runs it before JAX is imported;
    hub and gs:// models are checked once downloaded."""
    if not cfg.path:
        return
    if "://" in cfg.path:  # read once downloaded; that it can be read (gs:// needs gcsfs) is known now
        from rlexp.storage import filesystem

        filesystem(cfg.path, "model.path")
        return
    from rlexp.models.checkpoint import safetensors_files

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
    # config.json must agree with the option (layers, heads, vocab, ...); the error names every mismatch
    check_hf_config(cfg, read_hf_config(str(folder)), str(folder))
    return build_model(cfg, str(folder), mesh)


def copy_model(model: Any) -> Any:
    """A second module with `model`'s weights in device buffers of its own, on the same devices and shardings.

    The reference policy is the loaded policy's weights: copied on device instead of read from the checkpoint a
    second time (for the seed recipes, a second read of 8 to 40 GB from a bucket, and a second conversion). Buffers
    of its own because the train step donates the policy's: a shared buffer would be freed under the reference."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, state))
