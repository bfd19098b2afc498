"""Fix: Tunix 0.1.7's Qwen3 and Llama 3 decoder layers cannot be rematerialised inside the sampler.

With `model.remat=full` their layers call `nnx.remat` without `graph_updates=False`, which raises
TraceContextError inside the sampler's while_loop, so every rollout failed (Tunix's gemma4 passes the flag).
The replacement runs the same remat with that flag; without remat it calls Tunix's layer unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flax import nnx
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.compat import patching

TARGETS = (
    patching.Target(qwen3_lib.DecoderLayer, "__call__", "c86460330573eddb"),
    patching.Target(llama3_lib.DecoderLayer, "__call__", "fda8e1d236d52532"),
)


def _remat_without_graph_updates(tunix_call: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(self, *args, **kwargs):  # noqa: N807
        if self.config.remat_config in (qwen3_lib.RematConfig.DECODER, llama3_lib.RematConfig.DECODER):
            return nnx.remat(self.block.__func__, graph_updates=False)(self, *args, **kwargs)
        return tunix_call(self, *args, **kwargs)

    return __call__


def install() -> None:
    patching.install("tunix_remat", [(t, 50, _remat_without_graph_updates) for t in TARGETS], patching.REINSTALL)
