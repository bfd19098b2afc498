"""Patch `bf16_gemm`: 16-bit projections on CPU multiply on the CPU's bf16 instructions, forward and backward.

XLA:CPU runs a dot whose operands and result are bf16 as an f32 dot of upcast copies, at f32 speed, and the
backward dots JAX derives the same way. A dot of bf16 operands with an f32 result runs on the CPU's bf16
instructions (AVX512-BF16, AMX) at about twice that: 2304x512x1664 at 160 vs 300 GFLOP/s on 2 Zen 4 cores. With
`model.dtype=bfloat16` on CPU, the Qwen3 and Llama 3 MLP Linears and the tied LM head (`Embedder.decode`)
multiply through `matmul_f32_accumulate`, whose forward and backward dots all take that form and round to bf16
after, as XLA's upcast did: the same values up to float summation order. The q/k/v/o projections take it on the
token-rows path (`rlexp.perf.token_rows`). A model given LoRA adapters keeps plain dots (`keep_plain_dots`):
qwix adds the adapters inside the dots it intercepts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.compat import patching
from rlexp.compat.patching import PERF_KEY
from rlexp.perf import platform

NAME = "bf16_gemm"
MLP_INITS = (
    patching.Target(qwen3_lib.MLP, "__init__", "81d4c31c6bd7b992"),
    patching.Target(llama3_lib.MLP, "__init__", "c51e774571638ba6"),
)
TIED_HEADS = (
    patching.Target(qwen3_lib.Embedder, "decode", "b66b711501a36231"),
    patching.Target(llama3_lib.Embedder, "decode", "37b20a8a21a2b1f6"),
)
_NARROW_FLOATS = (jnp.bfloat16, jnp.float16)


def installed() -> bool:
    return NAME in patching.installed()


def on_cpu_bf16_gemm(*operands: jax.Array) -> bool:
    """Whether a dot of these operands goes through `matmul_f32_accumulate`: one 16-bit dtype, on CPU."""
    narrow = all(a.dtype in _NARROW_FLOATS for a in operands) and len({a.dtype for a in operands}) == 1
    return narrow and platform.on_cpu()


def _contract(a: jax.Array, b: jax.Array, a_dim: int, b_dim: int) -> jax.Array:
    """a . b over one dimension of each 2-D operand, accumulated and returned in float32."""
    return lax.dot_general(a, b, (((a_dim,), (b_dim,)), ((), ())), preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def matmul_f32_accumulate(x: jax.Array, w: jax.Array, w_transposed: bool = False) -> jax.Array:
    """x [M, K] times w [K, N] (or w [N, K] when w_transposed), 16-bit operands accumulated in float32 and
    rounded to x's dtype; its gradients are computed the same way."""
    return _contract(x, w, 1, 1 if w_transposed else 0).astype(x.dtype)


def _row_major_transpose(a: jax.Array) -> jax.Array:
    """a.T written out row-major. XLA would otherwise fold a transpose into the consuming dot's dimension
    numbers (or the operand's layout), and XLA:CPU runs a 16-bit dot contracting an operand's first
    dimension as an f32 dot of upcast copies; through a flat copy the dot reads a plain [K, M] operand.
    The copy costs ~1.8 ms against ~12 ms for a 2560x512x1664 bf16 dot, which it makes ~1.8x faster."""
    flat = lax.optimization_barrier(a.T.reshape(-1))
    return flat.reshape(a.shape[1], a.shape[0])


def _matmul_fwd(x, w, w_transposed):
    return matmul_f32_accumulate(x, w, w_transposed), (x, w)


def _matmul_bwd(w_transposed, residuals, g):
    x, w = residuals
    g = g.astype(x.dtype)
    dx = _contract(g, w, 1, 0 if w_transposed else 1)  # g [M, N] . w -> [M, K]
    if w_transposed:  # dw [N, K] = g^T x
        dw = _contract(_row_major_transpose(g), x, 1, 0)
    else:  # dw [K, N] = x^T g
        dw = _contract(_row_major_transpose(x), g, 1, 0)
    return dx.astype(x.dtype), dw.astype(w.dtype)


matmul_f32_accumulate.defvjp(_matmul_fwd, _matmul_bwd)


def mixed_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
    """nnx.Linear's dot: [..., K] x [K, N] through `matmul_f32_accumulate` on CPU with 16-bit operands."""
    (lc, rc), batch = dimension_numbers
    simple = tuple(lc) == (lhs.ndim - 1,) and tuple(rc) == (0,) and rhs.ndim == 2 and batch == ((), ())
    if not simple or preferred_element_type is not None or not installed() or not on_cpu_bf16_gemm(lhs, rhs):
        return lax.dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type, **kwargs)
    out = matmul_f32_accumulate(lhs.reshape(-1, lhs.shape[-1]), rhs)
    return out.reshape(*lhs.shape[:-1], rhs.shape[1])


def keeps_plain_dots(module: nnx.Module) -> bool:
    return getattr(module, "rlexp_plain_dots", False)


def keep_plain_dots(model: nnx.Module) -> None:
    """For a model qwix is to give LoRA adapters: qwix adds each adapter's product inside the projection's dot,
    which it intercepts, so under `matmul_f32_accumulate`'s custom VJP the adapter weights would be closed-over
    values autodiff cannot reach (JAX refuses). Its projections keep plain dots, from qwix's first pass on."""
    for _, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Linear) and node.dot_general is mixed_dot_general:
            node.dot_general = lax.dot_general
        elif isinstance(node, (qwen3_lib.Einsum, llama3_lib.Einsum, qwen3_lib.Embedder, llama3_lib.Embedder)):
            node.rlexp_plain_dots = True


def _linears_with_mixed_dot(tunix_init: Callable[..., Any]) -> Callable[..., Any]:
    def __init__(self, *args, **kwargs):  # noqa: N807
        tunix_init(self, *args, **kwargs)
        for linear in (self.gate_proj, self.up_proj, self.down_proj):
            if linear.dot_general is lax.dot_general:  # nnx.Linear's default; a custom dot stays
                linear.dot_general = mixed_dot_general

    return __init__


def _decode_with_mixed_dot(tunix_decode: Callable[..., Any]) -> Callable[..., Any]:
    """The tied LM head, x . E^T, through `matmul_f32_accumulate` on CPU with a 16-bit compute dtype."""

    def decode(self, x):
        x_in, w = x, self.input_embedding.value
        dtype = getattr(self, "dtype", None)  # qwen3 computes in its config dtype, llama3 in the weights'
        if dtype is not None:
            x, w = jnp.astype(x, dtype), jnp.astype(w, dtype)
        if not on_cpu_bf16_gemm(x, w) or keeps_plain_dots(self):
            return tunix_decode(self, x_in)
        out = matmul_f32_accumulate(x.reshape(-1, x.shape[-1]), w, True)
        return out.reshape(*x.shape[:-1], w.shape[0])

    return decode


def install(off: str) -> None:
    """Models built from now on multiply their 16-bit MLP Linears this way; the tied head at once."""
    layers = [(t, 10, _linears_with_mixed_dot) for t in MLP_INITS] + [
        (t, 10, _decode_with_mixed_dot) for t in TIED_HEADS
    ]
    patching.install(NAME, layers, off, PERF_KEY)
