"""Patch `token_rows`: on CPU, Qwen3's and Llama 3's projections multiply [tokens, features] rows.

Their MLP, their `Einsum` projections (q, k, v, o, an untied LM head) and the tied LM head (`Embedder.decode`)
multiply [batch, time, ...] activations. For the weight gradients XLA:CPU then contracts over two dimensions and
first copies each activation or cotangent into a transposed layout, strided (fused with the SiLU backward in the
MLP): 3.9 ms for one of them in the default run's ~30 ms train step. On CPU the patched modules run on
[batch * time, ...] rows, a free reshape, where the dots read transposed operands in place. The attention
output's 'ZNH,NHD->ZD' in float32 is one 2-D matmul: XLA:CPU lowered the einsum with a head-major copy of the
weight in every call (6 in each decoding step of the compute workload, 48 in its train step); the same form for
'ZD,DNH->ZNH' made those steps ~8 % slower, so those stay einsums. Other platforms keep Tunix's code (the MLP's
sharding constraint names three dimensions; on CPU Tunix applies none). Same values up to float summation order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.compat import patching
from rlexp.compat.patching import PERF_KEY
from rlexp.perf import bf16_gemm, platform

NAME = "token_rows"
EINSUMS = (
    patching.Target(qwen3_lib.Einsum, "__call__", "a0e7b73e78a4ad38"),
    patching.Target(llama3_lib.Einsum, "__call__", "34f6f4650079fb30"),
)
ROW_METHODS = (  # map [..., D] to [..., F] row by row
    patching.Target(qwen3_lib.MLP, "block", "b9c1557556fe2f3c"),
    patching.Target(llama3_lib.MLP, "block", "b9c1557556fe2f3c"),
    patching.Target(qwen3_lib.Embedder, "decode", "b66b711501a36231"),
    patching.Target(llama3_lib.Embedder, "decode", "37b20a8a21a2b1f6"),
)


def _on_token_rows(method: Callable[..., Any]) -> Callable[..., Any]:
    """A method mapping [..., D] to [..., F] row by row, run on [rows, D] on CPU."""

    def on_rows(self, x):
        if x.ndim <= 2 or not platform.on_cpu():
            return method(self, x)
        return method(self, x.reshape(-1, x.shape[-1])).reshape(*x.shape[:-1], -1)

    return on_rows


def rows_times_weight(x: jax.Array, w: jax.Array, spec: str, plain: bool = False) -> jax.Array:
    """einsum(spec, x, w) for a token-rows spec ('ZD,DNH->ZNH'); a 2-D matmul when x's trailing dims are w's
    leading ones and either 16-bit on CPU under `bf16_gemm`, or float32 contracting two dims. `plain`: a LoRA
    model's projection, which keeps the einsum (qwix intercepts it)."""
    (x_spec, w_spec), out_spec = spec.split("->")[0].split(","), spec.split("->")[1]
    k = len(x_spec) - 1
    if not plain and x_spec[1:] == w_spec[:k] and out_spec == x_spec[0] + w_spec[k:]:
        x2, w2 = x.reshape(x.shape[0], -1), w.reshape(int(np.prod(w.shape[:k])), -1)
        if bf16_gemm.installed() and bf16_gemm.on_cpu_bf16_gemm(x, w):
            return bf16_gemm.matmul_f32_accumulate(x2, w2).reshape(x.shape[0], *w.shape[k:])
        if k > 1 and x.dtype == w.dtype == jnp.float32:
            return jnp.matmul(x2, w2).reshape(x.shape[0], *w.shape[k:])
    return jnp.einsum(spec, x, w)


@functools.lru_cache
def token_rows_spec(einsum_str: str) -> tuple[int, str] | None:
    """For 'BTD,DNH->BTNH': (2, 'ZD,DNH->ZNH'), the leading dims that only the input and output share
    merged into one; None when fewer than two lead."""
    inputs, out = einsum_str.split("->")
    x_spec, w_spec = inputs.split(",")
    lead = 0
    while lead < min(len(x_spec), len(out)) and x_spec[lead] == out[lead] and x_spec[lead] not in w_spec:
        lead += 1
    if lead < 2:
        return None
    row = next(c for c in "ZYXWVU" if c not in einsum_str)
    return lead, f"{row}{x_spec[lead:]},{w_spec}->{row}{out[lead:]}"


def _einsum_on_token_rows(tunix_call: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(self, x):  # noqa: N807
        rows = token_rows_spec(self.einsum_str)
        if rows is None or x.ndim != len(self.einsum_str.split(",")[0]) or not platform.on_cpu():
            return tunix_call(self, x)
        lead, spec = rows
        w = self.w.value
        dtype = getattr(self, "dtype", None)  # qwen3 computes in its config dtype, llama3 in the inputs'
        if dtype is not None:
            x, w = jnp.astype(x, dtype), jnp.astype(w, dtype)
        out = rows_times_weight(x.reshape(-1, *x.shape[lead:]), w, spec, bf16_gemm.keeps_plain_dots(self))
        return out.reshape(*x.shape[:lead], *out.shape[1:])

    return __call__


def install(off: str) -> None:
    layers = [(t, 10, _einsum_on_token_rows) for t in EINSUMS] + [(t, 20, _on_token_rows) for t in ROW_METHODS]
    patching.install(NAME, layers, off, PERF_KEY)
