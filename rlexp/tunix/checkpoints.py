"""Checkpoint key mappings of Tunix's Hugging Face safetensors loaders: Tunix loads them through module-private
functions and exports no public name for them (rows `checkpoints` of rlexp.tunix.privates)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def qwen3_checkpoint_mapping() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(key-and-transform mapping, expert-stacking preprocess) of Tunix's Qwen3 safetensors loader."""
    from tunix.models.qwen3 import params as qwen3_params

    return qwen3_params._get_key_and_transform_mapping, qwen3_params._stack_experts


def llama3_checkpoint_mapping() -> Callable[..., Any]:
    """Key-and-transform mapping of Tunix's Llama 3 safetensors loader."""
    from tunix.models.llama3 import params as llama3_params

    return llama3_params._get_key_and_transform_mapping


def gemma4_checkpoint_mapping() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(key-and-transform mapping, preprocess-function factory) of Tunix's Gemma 4 safetensors loader."""
    from tunix.models.gemma4 import params_safetensors as gemma4_params

    return gemma4_params._get_key_and_transform_mapping, gemma4_params._make_preprocess_fn
