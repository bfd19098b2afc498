"""Fix: Tunix 0.1.7's Qwen3 and Llama 3 rotate with RoPE theta 1e6 and no frequency scaling, whatever the checkpoint.

Their attention calls the module-level `apply_rope(inputs, positions, head_dim, rope_theta=1_000_000)` without
a theta, so Llama 3.1 (theta 5e5 with "llama3" scaling) and Qwen3-2507 (theta 5e6) silently give other logits
than the checkpoint's. The replacement rotates with the frequencies the running model publishes through
`rope_frequencies` (`rlexp.models.tunix_text` computes them as Hugging Face does) and falls back to Tunix's own
function when none are published. Where its sines and cosines come from is `sin_cos`, which `rlexp.perf`'s
`rope_table` may replace with a table look-up (the same bits).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.compat import patching

_ROPE: contextvars.ContextVar[tuple[tuple[float, ...], int] | None] = contextvars.ContextVar("rlexp_rope", default=None)

TARGETS = (
    patching.Target(qwen3_lib, "apply_rope", "032f30f09c5ed1d5"),
    patching.Target(llama3_lib, "apply_rope", "81dab0d2c3b0fb22"),
)


@contextlib.contextmanager
def rope_frequencies(inv_freq: tuple[float, ...], positions: int = 0) -> Iterator[None]:
    """While inside, the fixed `apply_rope` rotates with `inv_freq` (head_dim/2 frequencies); `positions`: how
    many positions the running model can reach (0: unknown), for a table of them (`rlexp.perf.rope_table`)."""
    token = _ROPE.set((inv_freq, positions))
    try:
        yield
    finally:
        _ROPE.reset(token)


def angles(positions: jax.Array, inv_freq: tuple[float, ...]) -> jax.Array:
    """[..., frequencies] float32: each position times each frequency."""
    return positions[..., None].astype(jnp.float32) * jnp.asarray(inv_freq, jnp.float32)


def per_call_sin_cos(positions: jax.Array, inv_freq: tuple[float, ...], table_positions: int) -> tuple[jax.Array, ...]:
    """sin and cos [..., 1, frequencies] of the positions' angles, computed where they are used."""
    del table_positions
    a = angles(positions, inv_freq)[..., None, :]
    return jnp.sin(a), jnp.cos(a)


SinCos = Callable[[jax.Array, tuple[float, ...], int], tuple[jax.Array, ...]]
sin_cos: SinCos = per_call_sin_cos  # rlexp.perf.rope_table swaps in its table look-up


def set_sin_cos(fn: SinCos | None) -> None:
    """Where the fixed `apply_rope` takes its sines and cosines from; None: computed per call."""
    global sin_cos
    sin_cos = fn or per_call_sin_cos


def _with_published_frequencies(tunix_apply_rope: Callable[..., Any]) -> Callable[..., Any]:
    def apply_rope(inputs, positions, head_dim, rope_theta=1_000_000):
        published = _ROPE.get()
        if published is None or len(published[0]) != head_dim // 2:
            return tunix_apply_rope(inputs, positions, head_dim, rope_theta)
        sin, cos = sin_cos(positions, *published)
        first, second = jnp.split(inputs.astype(jnp.float32), 2, axis=-1)
        out = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
        return out.astype(inputs.dtype)

    return apply_rope


def install() -> None:
    patching.install("tunix_rope", [(t, 50, _with_published_frequencies) for t in TARGETS], patching.REINSTALL)
