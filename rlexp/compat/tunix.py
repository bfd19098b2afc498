"""Tunix 0.1.7 internals rlexp relies on (google-tunix is pinned in pyproject.toml).

- Checkpoint key mappings of Qwen3 and Llama 3: Tunix loads Hugging Face safetensors through these
  module-private functions and exports no public name for them.
- Stopping between steps: Tunix publishes a step's actor metrics one update late and exposes no public
  flush; a graceful stop (SIGTERM, reward error budget) publishes them so the last step is whole.
- The package's `__init__` imports every trainer Tunix has (agentic GRPO and through it pandas, distillation,
  DPO, PPO): ~1 s of every rlexp process, for modules a GRPO run never touches. rlexp imports the submodules
  it uses by their full names, so `defer_package_init` lets those run without it.
- Tunix's own progress bar: rlexp draws its own (`without_progress_bar`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


def defer_package_init() -> None:
    """Have the next `import tunix` skip the package's `__init__` until a top-level name is asked for.

    Submodule imports (`from tunix.rl import rl_cluster`) need only the package's path. The first lookup of a
    name the package itself defines (`tunix.GRPOLearner`, `from tunix import Sampler`) runs the real `__init__`
    into the same module, so code that uses the top-level API sees what it always saw. Nothing is imported or
    looked up before something imports tunix; a no-op when tunix is already imported.
    """
    if "tunix" not in sys.modules and not any(isinstance(f, _DeferredTunixFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _DeferredTunixFinder())


class _DeferredTunixFinder(importlib.abc.MetaPathFinder):
    """Finds `tunix` once, as the real package spec with a loader that defers its `__init__`."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tunix":
            return None
        sys.meta_path.remove(self)  # once: the real finders answer everything else, and any later reload
        spec = importlib.util.find_spec("tunix")
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _DeferredInitLoader(spec.loader)
        return spec


class _DeferredInitLoader(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:  # resource readers, get_filename ...: the real loader's
        return getattr(self.real, name)

    def exec_module(self, package: ModuleType) -> None:
        def run_init_then_get(name: str) -> Any:
            if name.startswith("__") and name != "__version__":  # probes (inspect, copy) need not import it all
                raise AttributeError(f"module 'tunix' has no attribute {name!r}")
            del package.__getattr__  # the real __init__ defines the names; later misses are plain AttributeErrors
            self.real.exec_module(package)
            return getattr(package, name)

        package.__getattr__ = run_init_then_get


class _NoProgressBar:
    """Stands in for Tunix's `ProgressBar`: the calls it receives, and nothing drawn or looked up."""

    def update_metrics(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def without_progress_bar(trainer: Any) -> Any:
    """Keep Tunix's trainer from drawing its own tqdm bar ("Actor Training", with loss and perplexity).

    On a terminal it was drawn beside rlexp's bar, the two overwriting each other's line; rlexp's bar and its
    per-10 % lines in logs show the step, the reward and the ETA. Tunix creates its bar in `train()` only when
    none is set and ends with `_pbar = None`, so a stand-in set before `train()` is used for the whole run. Its
    metric look-ups also ran with the bar disabled (off a terminal): ~1.3 ms a step.
    """
    trainer._pbar = _NoProgressBar()
    return trainer


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


def publish_buffered_rollout_metrics(cluster: Any) -> None:
    """Log the rollout metrics (rewards, lengths, rlexp's metric_fn outputs) that Tunix's RLCluster holds until the
    next step's first metric arrives. Tunix logs the same buffers again then, at the same step, aggregated over
    everything they hold by that time; rlexp's collector keeps the later value. The buffers are copied first:
    a rollout thread may be adding to them."""
    import dataclasses

    for buffered in list(cluster._buffered_train_metrics):
        snapshot = {name: (list(values), op) for name, (values, op) in list(buffered.metrics.items())}
        cluster._log_metrics(dataclasses.replace(buffered, metrics=snapshot))


def restored_checkpoint_metadata(train_ctx: Any) -> dict[str, Any]:
    """The custom metadata of the checkpoint the trainer restored ({} when it started fresh)."""
    return dict(getattr(train_ctx, "_restored_custom_metadata", None) or {})


def trains_lora_only(train_ctx: Any) -> bool:
    """Whether the trainer's checkpoints hold only LoRA parameters."""
    return bool(getattr(train_ctx, "_lora_enabled", False))
