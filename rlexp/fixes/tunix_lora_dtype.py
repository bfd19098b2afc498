"""Fix: with LoRA and a 16-bit compute dtype, Tunix 0.1.7's projections return float32 and break the KV cache.

qwix adds a float32 adapter product to a bf16 projection, which promotes the result; the k and v projections
then reach the sampler's bf16 KV cache and `dynamic_update_slice` refuses the mix (every bf16 model with
`trainer.lora.rank > 0`, on any platform). The replaced projections (`Einsum`) and MLP blocks of Qwen3, Llama 3
and Gemma 4 return their compute dtype; without adapters nothing changes (the dtype already matches).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from tunix.models.gemma4 import model as gemma4_lib
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.compat import patching

EINSUMS = (
    patching.Target(qwen3_lib.Einsum, "__call__", "a0e7b73e78a4ad38"),
    patching.Target(llama3_lib.Einsum, "__call__", "34f6f4650079fb30"),
    patching.Target(gemma4_lib.Einsum, "__call__", "592d276168d4a01b"),
)
MLP_BLOCKS = (
    patching.Target(qwen3_lib.MLP, "block", "b9c1557556fe2f3c"),
    patching.Target(llama3_lib.MLP, "block", "b9c1557556fe2f3c"),
    patching.Target(gemma4_lib.FeedForward, "block", "04259918fb542e9c"),
)


def in_dtype(out: jax.Array, dtype: Any) -> jax.Array:
    """A projection's result in the module's compute dtype (None: as it came)."""
    return out if dtype is None or out.dtype == dtype else out.astype(dtype)


def _einsum_in_dtype(tunix_call: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(self, x):  # noqa: N807
        return in_dtype(tunix_call(self, x), getattr(self, "dtype", None))

    return __call__


def _block_in_input_dtype(tunix_block: Callable[..., Any]) -> Callable[..., Any]:
    def block(self, x):
        return in_dtype(tunix_block(self, x), x.dtype)

    return block


def install() -> None:
    layers = [(t, 50, _einsum_in_dtype) for t in EINSUMS] + [(t, 50, _block_in_input_dtype) for t in MLP_BLOCKS]
    patching.install("tunix_lora_dtype", layers, patching.REINSTALL)
