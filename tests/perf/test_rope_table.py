"""rlexp.perf.rope_table: on CPU, RoPE's sines and cosines come from a table of every position, with the bits of
the per-call computation of rlexp.fixes.tunix_rope."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tunix.models.qwen3 import model as qwen3_lib

from rlexp import fixes
from rlexp.fixes.tunix_rope import rope_frequencies
from rlexp.perf import platform as perf_platform
from rlexp.perf.rope_table import ROPE_TABLE_LIMIT

# RoPE: the table of every position's sines and cosines (CPU) against the per-call computation
INV_FREQ = tuple(float(f) for f in (1 / 10_000 ** (np.arange(0, 64, 2) / 64)).astype(np.float32))
LEFT_PADDED = jnp.maximum(jnp.arange(72)[None] - 5 * jnp.arange(4)[:, None], 0)  # [4, 72], as Tunix's positions


def _rotate(x: jax.Array, positions: jax.Array, table_positions: int) -> jax.Array:
    fixes.apply()  # idempotent: the fixed apply_rope, whatever ran in this process first
    assert qwen3_lib.apply_rope.rlexp_patch == "tunix_rope"
    with rope_frequencies(INV_FREQ, table_positions):
        return qwen3_lib.apply_rope(x, positions, head_dim=x.shape[-1])


def _compiled(table_positions: int, x: jax.Array, positions: jax.Array = LEFT_PADDED) -> str:
    return jax.jit(lambda x: _rotate(x, positions, table_positions)).lower(x).compile().as_text()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_rope_table_gives_the_per_call_bits(dtype) -> None:
    x = jax.random.normal(jax.random.key(0), (4, 72, 8, 64), dtype)
    per_call = jax.jit(lambda x: _rotate(x, LEFT_PADDED, 0))(x)
    table = jax.jit(lambda x: _rotate(x, LEFT_PADDED, 128))(x)
    assert per_call.dtype == table.dtype == dtype
    np.testing.assert_array_equal(np.asarray(table, np.float32), np.asarray(per_call, np.float32))
    decoding = LEFT_PADDED[:, -1:] + 50  # one token per row, far into the table
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda x: _rotate(x, decoding, 128))(x[:, :1]), np.float32),
        np.asarray(jax.jit(lambda x: _rotate(x, decoding, 0))(x[:, :1]), np.float32),
    )
    if dtype == jnp.float32:

        def grad(table_positions):
            return jax.jit(jax.grad(lambda x: (_rotate(x, LEFT_PADDED, table_positions) ** 2).sum()))(x)

        np.testing.assert_array_equal(np.asarray(grad(128)), np.asarray(grad(0)))


def test_rope_table_leaves_no_sine_in_the_program() -> None:
    x = jnp.ones((4, 72, 8, 64), jnp.float32)
    assert " sine(" in _compiled(0, x)  # XLA:CPU computes it per element of x, inside the rotation
    assert " sine(" not in _compiled(128, x) and " cosine(" not in _compiled(128, x)
    long_context = ROPE_TABLE_LIMIT // len(INV_FREQ) + 1
    assert " sine(" in _compiled(long_context, x)  # too large to embed: the per-call path


def test_rope_past_the_table_is_nan_not_a_wrong_rotation() -> None:
    out = _rotate(jnp.ones((1, 2, 1, 64)), jnp.array([[7, 8]]), 8)
    assert bool(jnp.isfinite(out[0, 0]).all()) and bool(jnp.isnan(out[0, 1]).all())


def test_rope_table_is_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perf_platform, "on_cpu", lambda: False)  # TPU and GPU keep the per-call computation
    assert " sine(" in _compiled(128, jnp.ones((4, 72, 8, 64), jnp.float32))


@pytest.mark.slow
def test_the_user_command_s_programs_compute_no_sine(user_command_programs: dict[str, str]) -> None:
    """`python -m rlexp` as typed: its decoding step and train step read RoPE's table (no sine or cosine of an
    array left in XLA's optimized programs; the same run's numbers are pinned by tests/train/test_pinned_metrics.py)."""
    programs = {name: text for name, text in user_command_programs.items() if re.search("train_step|decode_fn", name)}
    assert any("train_step" in name for name in programs) and any("decode_fn" in name for name in programs)
    on_arrays = re.compile(r"= \w+\[\d[\d,]*\]\S* (sine|cosine)\(")  # not the learning rate's scalar cosine
    assert not [name for name, text in programs.items() if on_arrays.search(text)]
