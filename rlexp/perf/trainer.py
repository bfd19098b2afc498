"""Patches of Tunix's trainer: `optimizer_first` (Adam's state updated in its own buffers) and `one_device_put`
(a step's inputs placed on the mesh in one call).

`optimizer_first`: Tunix jits `_train_step(model, optimizer, inputs)` donating the optimizer (the model's params
may be the rollout's too, so they are not donated). JAX gives each donated buffer to the first output of the same
shape and dtype, in order, and the updated model comes first among the outputs: the params took the first
moments' buffers and the first moments the second moments', and to honour that XLA copied each tensor's moments
in and out around its update (136 copies in the compute workload's step, ~10 % of its op time). Jitted with the
optimizer first, each part returns to its own buffers and nothing is copied. Same function, same values; only the
argument order of the jitted wrapper differs from Tunix's `PeftTrainer.jit_train_and_eval_step`, which this
mirrors (its caches, its partials, its LoRA path).

`one_device_put`: `sharding_utils.shard_input` rebuilds each array of a TrainExample with
`jax.make_array_from_process_local_data`, one leaf at a time (~1.6 ms for a GRPO step's ten arrays, and a `jit`
of the identity traced per shape at step 1). In a single-process run the replacement is one `device_put` of the
tree, to the same shardings (Tunix's `get_sharding` for each leaf); a multi-process run keeps Tunix's path, where
each process's arrays are its local part of the global batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tunix.sft import peft_trainer, sharding_utils

from rlexp.compat import patching
from rlexp.compat.patching import PERF_KEY

JIT_STEP = patching.Target(peft_trainer.PeftTrainer, "jit_train_and_eval_step", "010c87bc7b7e026f")
SHARD_INPUT = patching.Target(sharding_utils, "shard_input", "0e7a062e6f77ed9a")


def _jit_with_optimizer_first(tunix_jit: Callable[..., Any]) -> Callable[..., Any]:
    from flax import nnx
    from jax.interpreters import pxla

    def jit_train_and_eval_step(self, skip_jit: bool = False, cache_nnx_graph: bool = False) -> tuple[Any, Any]:
        train_step, eval_step = self.create_train_step_fn(), self.create_eval_step_fn()
        if skip_jit:
            return train_step, eval_step
        if self._jitted_train_step_fn is None:
            self._shard_optimizer(pxla.thread_resources.env.physical_mesh)

            def _train_step(optimizer: Any, model: Any, inputs: Any) -> Any:  # Tunix's name, in profiles too
                return train_step(model, optimizer, inputs)

            jitted_train = nnx.jit(_train_step, donate_argnames=("optimizer",))
            jitted_eval = nnx.jit(eval_step)
            bind = nnx.cached_partial if cache_nnx_graph else functools.partial
            self._jitted_train_step_fn = functools.partial(bind(jitted_train, self.optimizer, self.model))
            self._jitted_eval_step_fn = functools.partial(bind(jitted_eval, self.model))
        return self._jitted_train_step_fn, self._jitted_eval_step_fn

    return jit_train_and_eval_step


def _shard_input_in_one_call(tunix_shard_input: Callable[..., Any]) -> Callable[..., Any]:
    import jax
    from jax.interpreters import pxla

    def shard_input(input_data: Any, data_sharding_axis: tuple[str, ...]) -> Any:
        mesh = pxla.thread_resources.env.physical_mesh
        if mesh.empty or jax.process_count() > 1:
            return tunix_shard_input(input_data, data_sharding_axis)
        pspec = jax.sharding.PartitionSpec(*data_sharding_axis)
        shardings = jax.tree.map(lambda x: sharding_utils.get_sharding(x, mesh=mesh, pspec=pspec), input_data)
        with jax.transfer_guard("allow"):
            return jax.device_put(input_data, shardings)

    return shard_input


def install_optimizer_first(off: str) -> None:
    patching.install("optimizer_first", [(JIT_STEP, 10, _jit_with_optimizer_first)], off, PERF_KEY)


def install_one_device_put(off: str) -> None:
    patching.install("one_device_put", [(SHARD_INPUT, 10, _shard_input_in_one_call)], off, PERF_KEY)
