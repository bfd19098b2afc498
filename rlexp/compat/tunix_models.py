"""Tunix 0.1.7's Qwen3 and Llama 3 modules, patched where their pinned behaviour is wrong for rlexp's models.

- RoPE: their attention calls a module-level `apply_rope` with its default theta (1e6) and no frequency
  scaling, whatever the config says (Llama 3.1: theta 5e5 with "llama3" scaling; Qwen3-2507: 5e6). The
  patched `apply_rope` uses the frequencies a running model publishes with `rope_frequencies`, and Tunix's
  own computation when none are published (`rlexp.models.tunix_text`).
- `model.remat=full`: their decoder layers call `nnx.remat` without `graph_updates=False`, which raises
  TraceContextError inside the sampler's while_loop (every rollout); Tunix's gemma4 passes it. The layers
  are re-pointed to the same remat with that flag.
- Projections on CPU: their MLP, their `Einsum` projections (q, k, v, o, an untied LM head) and the tied
  LM head (`Embedder.decode`) multiply [batch, time, ...] activations. For the weight gradients XLA:CPU then
  contracts over two dimensions and first copies each activation or cotangent into a transposed layout,
  strided (fused with the SiLU backward in the MLP): 3.9 ms for one of them in the default run's ~30 ms
  train step (benchmarks/README.md). On CPU the patched modules run on [batch * time, ...] rows, a free
  reshape, where the dots read transposed operands in place. Other platforms keep Tunix's code (the MLP's
  sharding constraint names three dimensions; on CPU Tunix applies none). Same values up to float
  summation order.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator

import jax
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


def _on_cpu() -> bool:
    return jax.devices()[0].platform == "cpu"


def _on_token_rows(original):
    """A method mapping [..., D] to [..., F] row by row, run on [rows, D] on CPU."""

    def method(self, x):
        if x.ndim <= 2 or not _on_cpu():
            return original(self, x)
        return original(self, x.reshape(-1, x.shape[-1])).reshape(*x.shape[:-1], -1)

    method.rlexp_patched, method.__wrapped__ = True, original
    return method


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


def _einsum_on_token_rows(original):
    def __call__(self, x):  # noqa: N807
        rows = token_rows_spec(self.einsum_str)
        if rows is None or x.ndim != len(self.einsum_str.split(",")[0]) or not _on_cpu():
            return original(self, x)
        lead, spec = rows
        w = self.w.value
        dtype = getattr(self, "dtype", None)  # qwen3 computes in its config dtype, llama3 in the inputs'
        if dtype is not None:
            x, w = jnp.astype(x, dtype), jnp.astype(w, dtype)
        out = jnp.einsum(spec, x.reshape(-1, *x.shape[lead:]), w)
        return out.reshape(*x.shape[:lead], *out.shape[1:])

    __call__.rlexp_patched, __call__.__wrapped__ = True, original
    return __call__


def patch_text_models() -> None:
    """Install the patches in Tunix's qwen3 and llama3 modules (idempotent)."""
    for lib in (qwen3_lib, llama3_lib):
        if not getattr(lib.Einsum.__call__, "rlexp_patched", False):
            lib.Einsum.__call__ = _einsum_on_token_rows(lib.Einsum.__call__)
        if not getattr(lib.MLP.block, "rlexp_patched", False):
            lib.MLP.block = _on_token_rows(lib.MLP.block)
        if not getattr(lib.Embedder.decode, "rlexp_patched", False):  # the tied LM head
            lib.Embedder.decode = _on_token_rows(lib.Embedder.decode)
        if not getattr(lib.apply_rope, "rlexp_patched", False):
            lib.apply_rope = _rope_from_context(lib.apply_rope)
        if not getattr(lib.DecoderLayer.__call__, "rlexp_patched", False):
            lib.DecoderLayer.__call__ = _remat_without_graph_updates(lib.DecoderLayer.__call__)
