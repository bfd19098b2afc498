"""Building a model family: the nnx model with a checkpoint's weights, and the Tunix ModelConfig of an option.

Pure Python at import time; each builder imports JAX, Tunix and the family's model code only when a model is
actually created.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlexp.config.family_rules import family_of
from rlexp.config.schema import ModelConfig


def build_model(m: ModelConfig, ckpt_dir: str, mesh: Any = None) -> Any:
    """Create the family's nnx model with the checkpoint's weights (local folder or gs://)."""
    family_of(m)
    builders: dict[str, Callable[..., Any]] = {
        "qwen3": _build_tunix_text,
        "llama3": _build_tunix_text,
        "gemma4": _build_gemma4,
        "gpt_oss": _build_gpt_oss,
    }
    return builders[m.family](m, ckpt_dir, mesh)


def tunix_config(m: ModelConfig) -> Any:
    """The Tunix ModelConfig of the option's family, from its dimensions (rlexp's RoPE fixes included)."""
    family_of(m)
    if m.family in ("llama3", "qwen3"):
        from rlexp.models import tunix_text

        return tunix_text.tunix_config(m)
    if m.family == "gemma4":
        from rlexp.models import gemma4

        return gemma4.tunix_config(m)
    from rlexp.models.gpt_oss import params

    return params.tunix_config(m)


def _build_tunix_text(m: ModelConfig, ckpt_dir: str, mesh: Any) -> Any:
    from rlexp.models import tunix_text

    return tunix_text.create(m, ckpt_dir, mesh)


def _build_gemma4(m: ModelConfig, ckpt_dir: str, mesh: Any) -> Any:
    from rlexp.models import gemma4

    return gemma4.create(m, ckpt_dir, mesh)


def _build_gpt_oss(m: ModelConfig, ckpt_dir: str, mesh: Any) -> Any:
    from rlexp.models.gpt_oss import params

    return params.create(m, ckpt_dir, mesh)
