"""Tunix 0.1.7 internals rlexp relies on (google-tunix is pinned in pyproject.toml).

- Checkpoint key mappings of Qwen3 and Llama 3: Tunix loads Hugging Face safetensors through these
  module-private functions and exports no public name for them.
- Stopping between steps: Tunix publishes a step's actor metrics one update late and exposes no public
  flush; a graceful stop (SIGTERM, reward error budget) publishes them so the last step is whole.
"""

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


def publish_pending_train_metrics(train_ctx: Any) -> None:
    """Write the actor metrics Tunix holds back for the next update (loss, KL, grad norm)."""
    train_ctx._write_train_metrics()


def trains_lora_only(train_ctx: Any) -> bool:
    """Whether the trainer's checkpoints hold only LoRA parameters."""
    return bool(getattr(train_ctx, "_lora_enabled", False))
