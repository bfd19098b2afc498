"""Tunix 0.1.7's Qwen3 and Llama 3 modules, patched where their pinned behaviour is wrong for rlexp's models.

- RoPE: their attention calls a module-level `apply_rope` with its default theta (1e6) and no frequency
  scaling, whatever the config says (Llama 3.1: theta 5e5 with "llama3" scaling; Qwen3-2507: 5e6). The
  patched `apply_rope` uses the frequencies a running model publishes with `rope_frequencies`, and Tunix's
  own computation when none are published (`rlexp.models.tunix_text`).
- `model.remat=full`: their decoder layers call `nnx.remat` without `graph_updates=False`, which raises
  TraceContextError inside the sampler's while_loop (every rollout); Tunix's gemma4 passes it. The layers
  are re-pointed to the same remat with that flag.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax.numpy as jnp
from flax import nnx
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

_INV_FREQ: contextvars.ContextVar[tuple[float, ...] | None] = contextvars.ContextVar("rlexp_rope", default=None)


@contextlib.contextmanager
def rope_frequencies(inv_freq: tuple[float, ...]) -> Iterator[None]:
    """While inside, the patched `apply_rope` rotates with `inv_freq` (head_dim/2 frequencies)."""
    token = _INV_FREQ.set(inv_freq)
    try:
        yield
    finally:
        _INV_FREQ.reset(token)


def _rope_from_context(original):
    def apply_rope(inputs, positions, head_dim, rope_theta=1_000_000):
        inv = _INV_FREQ.get()
        if inv is None or len(inv) != head_dim // 2:
            return original(inputs, positions, head_dim, rope_theta)
        angles = positions[..., None].astype(jnp.float32) * jnp.asarray(inv, jnp.float32)
        angles = angles[..., None, :]
        sin, cos = jnp.sin(angles), jnp.cos(angles)
        first, second = jnp.split(inputs.astype(jnp.float32), 2, axis=-1)
        out = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
        return out.astype(inputs.dtype)

    apply_rope.rlexp_patched = True
    return apply_rope


def _remat_without_graph_updates(original):
    def __call__(self, *args, **kwargs):  # noqa: N807
        if self.config.remat_config in (qwen3_lib.RematConfig.DECODER, llama3_lib.RematConfig.DECODER):
            return nnx.remat(self.block.__func__, graph_updates=False)(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    __call__.rlexp_patched = True
    return __call__


def patch_text_models() -> None:
    """Install both patches in Tunix's qwen3 and llama3 modules (idempotent)."""
    for lib in (qwen3_lib, llama3_lib):
        if not getattr(lib.apply_rope, "rlexp_patched", False):
            lib.apply_rope = _rope_from_context(lib.apply_rope)
        if not getattr(lib.DecoderLayer.__call__, "rlexp_patched", False):
            lib.DecoderLayer.__call__ = _remat_without_graph_updates(lib.DecoderLayer.__call__)
