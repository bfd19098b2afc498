"""Tunix 0.1.7 internals rlexp relies on (google-tunix is pinned in pyproject.toml).

- Checkpoint key mappings of Qwen3 and Llama 3: Tunix loads Hugging Face safetensors through these
  module-private functions and exports no public name for them.
- Stopping between steps: Tunix publishes a step's actor metrics one update late and exposes no public
  flush; a graceful stop (SIGTERM, reward error budget) publishes them so the last step is whole.
- The package's `__init__` imports every trainer Tunix has (agentic GRPO and through it pandas, distillation,
  DPO, PPO): ~1 s of every rlexp process, for modules a GRPO run never touches. rlexp imports the submodules
  it uses by their full names, so `defer_package_init` lets those run without it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import Any


def defer_package_init() -> None:
    """Register `tunix` without running its `__init__` until a top-level name is asked for.

    Submodule imports (`from tunix.rl import rl_cluster`) need only the package's path. The first lookup of a
    name the package itself defines (`tunix.GRPOLearner`, `from tunix import Sampler`) runs the real `__init__`
    into the same module, so code that uses the top-level API sees what it always saw. A no-op when tunix is
    already imported or not installed.
    """
    if "tunix" in sys.modules:
        return
    spec = importlib.util.find_spec("tunix")
    if spec is None or spec.loader is None:
        return
    package = importlib.util.module_from_spec(spec)

    def run_init_then_get(name: str) -> Any:
        if name.startswith("__") and name != "__version__":  # probes (inspect, copy) need not import every trainer
            raise AttributeError(f"module 'tunix' has no attribute {name!r}")
        del package.__getattr__  # the real __init__ defines the names; later misses are plain AttributeErrors
        spec.loader.exec_module(package)
        return getattr(package, name)

    package.__getattr__ = run_init_then_get
    sys.modules["tunix"] = package


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
