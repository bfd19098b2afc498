"""Patch `rope_table`: on CPU, RoPE's sines and cosines are looked up in a table of every position.

XLA:CPU fuses the sine into each rotation and computes it for every element of q and k, once per head, through
libm (3.8 ms for q and k of one layer of the compute workload's train step, 0.3 ms with the table). The table
holds every position the model can reach (`model.max_context`), made once by XLA with the arithmetic of the
per-call path (`rlexp.fixes.tunix_rope`), so the bits are the same. Past the table a position reads NaN, loud
where a clamped index would rotate silently wrong. Tables over `ROPE_TABLE_LIMIT` entries and other platforms
keep the per-call path. It replaces no library function: it feeds the RoPE fix.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rlexp.fixes import tunix_rope
from rlexp.perf import platform

NAME = "rope_table"
ROPE_TABLE_LIMIT = 1 << 20  # positions x frequencies: a larger table (a long context) is not embedded in programs


@functools.lru_cache(maxsize=16)
def rope_table(inv_freq: tuple[float, ...], positions: int) -> np.ndarray:
    """[2, positions, frequencies] float32: the sine and cosine of every position's angles, computed by XLA now
    (also while a program is being traced) with the arithmetic of the per-call path, so the bits are the same."""
    with jax.ensure_compile_time_eval():
        angles = tunix_rope.angles(jnp.arange(positions, dtype=jnp.int32), inv_freq)
        return np.stack([np.asarray(jnp.sin(angles)), np.asarray(jnp.cos(angles))])


def table_sin_cos(positions: jax.Array, inv_freq: tuple[float, ...], table_positions: int) -> tuple[jax.Array, ...]:
    if table_positions and table_positions * len(inv_freq) <= ROPE_TABLE_LIMIT and platform.on_cpu():
        table = jnp.asarray(rope_table(inv_freq, table_positions))
        sin_cos = jnp.take(table, positions, axis=1, mode="fill", fill_value=jnp.nan)
        return sin_cos[0][..., None, :], sin_cos[1][..., None, :]
    return tunix_rope.per_call_sin_cos(positions, inv_freq, table_positions)


def install(off: str) -> None:
    del off  # no library source to guard
    tunix_rope.set_sin_cos(table_sin_cos)


def uninstall() -> None:
    tunix_rope.set_sin_cos(None)
