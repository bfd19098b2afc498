"""Tunix 0.1.7's Qwen3 and Llama 3 modules, patched where their pinned behaviour is wrong for rlexp's models.

- RoPE: their attention calls a module-level `apply_rope` with its default theta (1e6) and no frequency
  scaling, whatever the config says (Llama 3.1: theta 5e5 with "llama3" scaling; Qwen3-2507: 5e6). The
  patched `apply_rope` uses the frequencies a running model publishes with `rope_frequencies`, and Tunix's
  own computation when none are published (`rlexp.models.tunix_text`). On CPU, when the model also publishes
  how many positions a run can reach, it looks the sines and cosines up in a table of every position, made
  once by XLA with the same arithmetic (the same bits): XLA:CPU fuses the sine into each rotation and computes
  it for every element of q and k, once per head, through libm (3.8 ms for q and k of one layer of the
  compute workload's train step, 0.3 ms with the table).
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
- 16-bit compute on CPU (`model.dtype=bfloat16`): XLA:CPU runs a dot whose operands and result are bf16 as an
  f32 dot of upcast copies, at f32 speed, and the backward dots JAX derives the same way. A dot of bf16
  operands with an f32 result runs on the CPU's bf16 instructions (AVX512-BF16, AMX) at about twice that:
  2304x512x1664 at 160 vs 300 GFLOP/s on 2 Zen 4 cores. On CPU the projections above and the MLP's
  Linears multiply through `matmul_f32_accumulate`, whose forward and backward dots all take that form and
  round to bf16 after, as XLA's upcast did: the same values up to float summation order. A model given LoRA
  adapters keeps plain dots (`keep_plain_dots`): qwix adds the adapters inside the dots it intercepts.
- Decode attention on CPU: a one-token decoding step of Qwen3 attends through `decode_attention` (a C++
  kernel as an XLA custom call) instead of two einsums that copy each layer's KV cache head-major every step.
  Same values (bf16: the same bits); prefill, training and other platforms keep Tunix's attention.
- LoRA with a 16-bit compute dtype, on every platform: qwix adds a float32 adapter product to a bf16
  projection, which promotes it, and the sampler's bf16 KV cache refuses the k and v projections. The
  projections and MLP blocks return their compute dtype (`_in_dtype`); gemma4's too (`patch_projection_dtypes`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import lax
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.compat import decode_attention

_ROPE: contextvars.ContextVar[tuple[tuple[float, ...], int] | None] = contextvars.ContextVar("rlexp_rope", default=None)
ROPE_TABLE_LIMIT = 1 << 20  # positions x frequencies: a larger table (a long context) is not embedded in programs


@contextlib.contextmanager
def rope_frequencies(inv_freq: tuple[float, ...], positions: int = 0) -> Iterator[None]:
    """While inside, the patched `apply_rope` rotates with `inv_freq` (head_dim/2 frequencies); `positions`: how
    many positions the running model can reach (0: unknown), which lets it use a table on CPU."""
    token = _ROPE.set((inv_freq, positions))
    try:
        yield
    finally:
        _ROPE.reset(token)


def _rope_angles(positions: jax.Array, inv_freq: tuple[float, ...]) -> jax.Array:
    return positions[..., None].astype(jnp.float32) * jnp.asarray(inv_freq, jnp.float32)


@functools.lru_cache(maxsize=16)
def rope_table(inv_freq: tuple[float, ...], positions: int) -> np.ndarray:
    """[2, positions, frequencies] float32: the sine and cosine of every position's angles, computed by XLA now
    (also while a program is being traced) with the arithmetic of the per-call path, so the bits are the same."""
    with jax.ensure_compile_time_eval():
        angles = _rope_angles(jnp.arange(positions, dtype=jnp.int32), inv_freq)
        return np.stack([np.asarray(jnp.sin(angles)), np.asarray(jnp.cos(angles))])


def _rope_sin_cos(positions: jax.Array, inv_freq: tuple[float, ...], table_positions: int) -> tuple[jax.Array, ...]:
    if table_positions and table_positions * len(inv_freq) <= ROPE_TABLE_LIMIT and _on_cpu():
        table = jnp.asarray(rope_table(inv_freq, table_positions))
        # a position past the table reads NaN: loud, where a clamped index would rotate silently wrong
        sin_cos = jnp.take(table, positions, axis=1, mode="fill", fill_value=jnp.nan)
        return sin_cos[0][..., None, :], sin_cos[1][..., None, :]
    angles = _rope_angles(positions, inv_freq)[..., None, :]
    return jnp.sin(angles), jnp.cos(angles)


def _rope_from_context(original):
    def apply_rope(inputs, positions, head_dim, rope_theta=1_000_000):
        published = _ROPE.get()
        if published is None or len(published[0]) != head_dim // 2:
            return original(inputs, positions, head_dim, rope_theta)
        sin, cos = _rope_sin_cos(positions, *published)
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


_NARROW_FLOATS = (jnp.bfloat16, jnp.float16)


def _narrow(*arrays: jax.Array) -> bool:
    return all(a.dtype in _NARROW_FLOATS for a in arrays) and len({a.dtype for a in arrays}) == 1


def _on_cpu_bf16_gemm(*operands: jax.Array) -> bool:
    """Whether a dot of these operands goes through `matmul_f32_accumulate`: one 16-bit dtype, on CPU."""
    return _narrow(*operands) and _on_cpu()


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


def _mixed_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
    """nnx.Linear's dot: [..., K] x [K, N] through `matmul_f32_accumulate` on CPU with 16-bit operands."""
    (lc, rc), batch = dimension_numbers
    simple = tuple(lc) == (lhs.ndim - 1,) and tuple(rc) == (0,) and rhs.ndim == 2 and batch == ((), ())
    if not simple or preferred_element_type is not None or not _on_cpu_bf16_gemm(lhs, rhs):
        return lax.dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type, **kwargs)
    out = matmul_f32_accumulate(lhs.reshape(-1, lhs.shape[-1]), rhs)
    return out.reshape(*lhs.shape[:-1], rhs.shape[1])


def _keeps_plain_dots(module: nnx.Module) -> bool:
    return getattr(module, "rlexp_plain_dots", False)


def keep_plain_dots(model: nnx.Module) -> None:
    """For a model qwix is to give LoRA adapters: qwix adds each adapter's product inside the projection's dot,
    which it intercepts, so under `matmul_f32_accumulate`'s custom VJP the adapter weights would be closed-over
    values autodiff cannot reach (JAX refuses). Its projections keep plain dots, from qwix's first pass on."""
    for _, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Linear) and node.dot_general is _mixed_dot_general:
            node.dot_general = lax.dot_general
        elif isinstance(node, (qwen3_lib.Einsum, llama3_lib.Einsum, qwen3_lib.Embedder, llama3_lib.Embedder)):
            node.rlexp_plain_dots = True


def _in_dtype(out: jax.Array, dtype) -> jax.Array:
    """A projection's result in the module's compute dtype. qwix's LoRA adds a float32 adapter product to a
    bf16 projection, which promotes it; the k and v projections then reach the sampler's bf16 KV cache and
    `dynamic_update_slice` refuses the mix (every bf16 model with `trainer.lora.rank > 0`, on any platform)."""
    return out if dtype is None or out.dtype == dtype else out.astype(dtype)


def _mlp_in_input_dtype(original):
    def block(self, x):
        return _in_dtype(original(self, x), x.dtype)

    block.rlexp_patched, block.__wrapped__ = True, original
    return block


def _einsum_in_dtype(original):
    def __call__(self, x):  # noqa: N807
        return _in_dtype(original(self, x), getattr(self, "dtype", None))

    __call__.rlexp_patched, __call__.__wrapped__ = True, original
    return __call__


def patch_projection_dtypes(lib) -> None:
    """A Tunix model module's `Einsum` projections and `FeedForward` block return their compute dtype under LoRA
    too (`_in_dtype`); for gemma4, whose modules rlexp otherwise runs as Tunix wrote them. Idempotent."""
    if not getattr(lib.Einsum.__call__, "rlexp_patched", False):
        lib.Einsum.__call__ = _einsum_in_dtype(lib.Einsum.__call__)
    if not getattr(lib.FeedForward.block, "rlexp_patched", False):
        lib.FeedForward.block = _mlp_in_input_dtype(lib.FeedForward.block)


def _linears_with_mixed_dot(original):
    def __init__(self, *args, **kwargs):  # noqa: N807
        original(self, *args, **kwargs)
        for linear in (self.gate_proj, self.up_proj, self.down_proj):
            if linear.dot_general is lax.dot_general:  # nnx.Linear's default; a custom dot stays
                linear.dot_general = _mixed_dot_general

    __init__.rlexp_patched, __init__.__wrapped__ = True, original
    return __init__


def _rows_times_weight(x: jax.Array, w: jax.Array, spec: str, bf16_gemm: bool = True) -> jax.Array:
    """einsum(spec, x, w) for a token-rows spec ('ZD,DNH->ZNH'); a 2-D matmul when x's trailing dims are w's
    leading ones and either 16-bit on CPU, or float32 contracting two dims: XLA:CPU lowered the attention output's
    'ZNH,NHD->ZD' with a head-major copy of the weight in every call (6 in each decoding step of the compute
    workload, 48 in its train step). The same 2-D form for 'ZD,DNH->ZNH' in float32 (whose input gradient also
    contracts two dims) made that workload's steps ~8 % slower, so those stay einsums."""
    (x_spec, w_spec), out_spec = spec.split("->")[0].split(","), spec.split("->")[1]
    k = len(x_spec) - 1
    if bf16_gemm and x_spec[1:] == w_spec[:k] and out_spec == x_spec[0] + w_spec[k:]:
        x2, w2 = x.reshape(x.shape[0], -1), w.reshape(int(np.prod(w.shape[:k])), -1)
        if _on_cpu_bf16_gemm(x, w):
            return matmul_f32_accumulate(x2, w2).reshape(x.shape[0], *w.shape[k:])
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
        out = _rows_times_weight(x.reshape(-1, *x.shape[lead:]), w, spec, not _keeps_plain_dots(self))
        return out.reshape(*x.shape[:lead], *out.shape[1:])

    __call__.rlexp_patched, __call__.__wrapped__ = True, original
    return __call__


def _decode_with_mixed_dot(original):
    """The tied LM head, x . E^T, through `matmul_f32_accumulate` on CPU with a 16-bit compute dtype."""

    def decode(self, x):
        x_in, w = x, self.input_embedding.value
        dtype = getattr(self, "dtype", None)  # qwen3 computes in its config dtype, llama3 in the weights'
        if dtype is not None:
            x, w = jnp.astype(x, dtype), jnp.astype(w, dtype)
        if not _on_cpu_bf16_gemm(x, w) or _keeps_plain_dots(self):
            return original(self, x_in)
        out = matmul_f32_accumulate(x.reshape(-1, x.shape[-1]), w, True)
        return out.reshape(*x.shape[:-1], w.shape[0])

    decode.rlexp_patched, decode.__wrapped__ = True, original
    return decode


def _decode_attention_block(original):
    """Qwen3's attention block, whose one-token decoding steps on CPU attend through `decode_attention`.

    The step mirrors Tunix 0.1.7's block up to its attention (projections, norms, RoPE, the cache row written
    at `end_index`); prefill, training and every case `decode_attention.applies` refuses run Tunix's block.
    """

    def block(self, x, segment_pos, cache, attn_mask, segment_ids=None):
        decoding = cache is not None and x.shape[1] == 1 and attn_mask is not None and attn_mask.ndim == 3
        if not decoding or not decode_attention.applies(cache["k"].dtype):  # applies: one CPU device
            return original(self, x, segment_pos, cache, attn_mask, segment_ids)
        query = qwen3_lib.apply_rope(self.q_norm(self.q_proj(x)), segment_pos, head_dim=self.head_dim)
        key = qwen3_lib.apply_rope(self.k_norm(self.k_proj(x)), segment_pos, head_dim=self.head_dim)
        value = self.v_proj(x)
        if not query.dtype == key.dtype == value.dtype == cache["k"].dtype:  # e.g. an adapter's promotion
            return original(self, x, segment_pos, cache, attn_mask, segment_ids)
        slot = (0, cache["end_index"][0] % cache["v"].shape[1], 0, 0)
        key = lax.dynamic_update_slice(cache["k"], key, slot)
        value = lax.dynamic_update_slice(cache["v"], value, slot)
        b, _, heads, dim = query.shape
        kv_heads = key.shape[2]
        grouped = query.reshape(b, kv_heads, heads // kv_heads, dim)
        out = decode_attention.decode_attention(grouped, key, value, attn_mask[:, 0, :], self.scale)
        new_cache = {"v": value, "k": key, "end_index": cache["end_index"] + 1}
        return new_cache, self.o_proj(out.reshape(b, 1, heads, dim))

    block.rlexp_patched, block.__wrapped__ = True, original
    return block


def patch_text_models() -> None:
    """Install the patches in Tunix's qwen3 and llama3 modules (idempotent)."""
    for lib in (qwen3_lib, llama3_lib):
        if not getattr(lib.Einsum.__call__, "rlexp_patched", False):
            lib.Einsum.__call__ = _einsum_in_dtype(_einsum_on_token_rows(lib.Einsum.__call__))
        if not getattr(lib.MLP.block, "rlexp_patched", False):
            lib.MLP.block = _on_token_rows(_mlp_in_input_dtype(lib.MLP.block))
        if not getattr(lib.Embedder.decode, "rlexp_patched", False):  # the tied LM head
            lib.Embedder.decode = _on_token_rows(_decode_with_mixed_dot(lib.Embedder.decode))
        if not getattr(lib.MLP.__init__, "rlexp_patched", False):
            lib.MLP.__init__ = _linears_with_mixed_dot(lib.MLP.__init__)
        if not getattr(lib.apply_rope, "rlexp_patched", False):
            lib.apply_rope = _rope_from_context(lib.apply_rope)
        if not getattr(lib.DecoderLayer.__call__, "rlexp_patched", False):
            lib.DecoderLayer.__call__ = _remat_without_graph_updates(lib.DecoderLayer.__call__)
    if not getattr(qwen3_lib.Attention.block, "rlexp_patched", False):
        qwen3_lib.Attention.block = _decode_attention_block(qwen3_lib.Attention.block)
