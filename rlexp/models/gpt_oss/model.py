"""gpt-oss in flax nnx, laid out like Tunix's models so Tunix's Sampler, RLCluster and learners use it as is.

Same call signature as tunix.models.qwen3 (`model(tokens, positions, cache, attention_mask) ->
(logits, cache)`), same `init_cache` and `get_model_input`, mesh axes `fsdp` and `tp`.
Architecture (matching Hugging Face `GptOssForCausalLM`): pre-norm decoder layers alternating
sliding-window (even layers) and full causal attention, grouped-query attention with biases and one
learned sink logit per head, YaRN RoPE, and a top-k mixture of experts whose experts use a clamped
SwiGLU `(up + 1) * gate * sigmoid(alpha * gate)` over interleaved gate/up columns. Tokens are routed
with `jax.lax.ragged_dot` (sorted by expert), so memory grows with tokens x k, not tokens x experts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
from flax import nnx
from tunix.utils import compat

from rlexp.models.tunix_text import empty_kv_cache

K_MASK = -2.3819763e38
Cache = dict[str, dict[str, jaxtyping.Array]]


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
    """Partition specs over the mesh axes `fsdp` and `tp`; experts are split along `expert_axis`."""

    emb_vd: tuple[str | None, ...] = ("tp", "fsdp")
    emb_dv: tuple[str | None, ...] = ("fsdp", "tp")
    q_weight_dnh: tuple[str | None, ...] = ("fsdp", "tp", None)
    kv_weight_dnh: tuple[str | None, ...] = ("fsdp", "tp", None)
    o_weight_nhd: tuple[str | None, ...] = ("tp", None, "fsdp")
    heads: tuple[str | None, ...] = ("tp",)
    exp_weight_edf: tuple[str | None, ...] = ("fsdp", None, "tp")  # experts along the fsdp axis
    exp_weight_efd: tuple[str | None, ...] = ("fsdp", "tp", None)
    exp_bias_ef: tuple[str | None, ...] = ("fsdp", "tp")
    exp_bias_ed: tuple[str | None, ...] = ("fsdp", None)
    vector: tuple[str | None, ...] = (None,)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    num_layers: int
    vocab_size: int
    embed_dim: int
    hidden_dim: int  # per-expert MLP width
    num_heads: int
    head_dim: int
    num_kv_heads: int
    num_experts: int
    experts_per_token: int
    sliding_window: int = 128
    sliding_layers: tuple[bool, ...] = ()  # per layer; empty = even layers slide
    rope_theta: float = 150_000.0
    rope_scaling: tuple[tuple[str, Any], ...] = ()  # Hugging Face rope_scaling items (yarn)
    norm_eps: float = 1e-5
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702
    use_tied_embedding: bool = False
    remat: bool = False
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    shd_config: ShardingConfig = ShardingConfig()

    def is_sliding(self, layer: int) -> bool:
        return self.sliding_layers[layer] if self.sliding_layers else layer % 2 == 0

    @classmethod
    def gpt_oss_20b(cls) -> ModelConfig:
        yarn = (("beta_fast", 32.0), ("beta_slow", 1.0), ("factor", 32.0), ("original_max_position_embeddings", 4096),
                ("rope_type", "yarn"))  # fmt: skip
        return cls(
            num_layers=24, vocab_size=201088, embed_dim=2880, hidden_dim=2880, num_heads=64, head_dim=64,
            num_kv_heads=8, num_experts=32, experts_per_token=4, rope_scaling=yarn,
        )  # fmt: skip


def rope_tables(cfg: ModelConfig) -> tuple[np.ndarray, float]:
    """Inverse frequencies and the cos/sin scale ("attention factor") of YaRN or plain RoPE."""
    dim, base = cfg.head_dim, cfg.rope_theta
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    scaling = dict(cfg.rope_scaling)
    if scaling.get("rope_type", "default") != "yarn":
        return (1.0 / pos_freqs).astype(np.float32), 1.0
    factor = float(scaling["factor"])
    orig = float(scaling["original_max_position_embeddings"])
    attention_factor = scaling.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
    beta_fast, beta_slow = float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency, 0: interpolate by `factor`
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv.astype(np.float32), float(attention_factor)


def apply_rope(
    x: jaxtyping.Array, positions: jaxtyping.Array, inv_freq: jaxtyping.Array, scale: float
) -> jaxtyping.Array:
    angles = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, H/2]
    cos, sin = (jnp.cos(angles) * scale)[:, :, None, :], (jnp.sin(angles) * scale)[:, :, None, :]
    first, second = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1).astype(x.dtype)


def _param(rngs: nnx.Rngs, shape: tuple[int, ...], dtype: Any, sharding: tuple, init: str = "normal") -> nnx.Param:
    if init == "zeros":
        value = jnp.zeros(shape, dtype)
    elif init == "ones":
        value = jnp.ones(shape, dtype)
    else:
        value = nnx.initializers.normal(0.02, dtype=dtype)(rngs.params(), shape)
    return nnx.Param(value, sharding=sharding)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.w = _param(rngs, (dim,), cfg.param_dtype, cfg.shd_config.vector, "ones")
        self.eps, self.dtype = cfg.norm_eps, cfg.dtype

    def __call__(self, x: jaxtyping.Array) -> jaxtyping.Array:
        x = x.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return (self.w[...].astype(jnp.float32) * x).astype(self.dtype)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, layer: int, *, rngs: nnx.Rngs) -> None:
        d, n, k, h, s = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.shd_config
        self.cfg = cfg
        self.window = cfg.sliding_window if cfg.is_sliding(layer) else None
        self.q_proj = _param(rngs, (d, n, h), cfg.param_dtype, s.q_weight_dnh)
        self.k_proj = _param(rngs, (d, k, h), cfg.param_dtype, s.kv_weight_dnh)
        self.v_proj = _param(rngs, (d, k, h), cfg.param_dtype, s.kv_weight_dnh)
        self.o_proj = _param(rngs, (n, h, d), cfg.param_dtype, s.o_weight_nhd)
        self.q_bias = _param(rngs, (n, h), cfg.param_dtype, ("tp", None), "zeros")
        self.k_bias = _param(rngs, (k, h), cfg.param_dtype, ("tp", None), "zeros")
        self.v_bias = _param(rngs, (k, h), cfg.param_dtype, ("tp", None), "zeros")
        self.o_bias = _param(rngs, (d,), cfg.param_dtype, s.vector, "zeros")
        self.sinks = _param(rngs, (n,), cfg.param_dtype, s.heads, "zeros")

    def __call__(
        self,
        x: jaxtyping.Array,
        positions: jaxtyping.Array,
        cache: dict[str, jaxtyping.Array] | None,
        attn_mask: jaxtyping.Array | None,
        rope: tuple[jaxtyping.Array, float],
    ) -> tuple[dict[str, jaxtyping.Array] | None, jaxtyping.Array]:
        cfg, dt = self.cfg, self.cfg.dtype
        w = lambda p: p[...].astype(dt)  # noqa: E731
        x = x.astype(dt)
        q = jnp.einsum("BTD,DNH->BTNH", x, w(self.q_proj)) + w(self.q_bias)
        k = jnp.einsum("BSD,DKH->BSKH", x, w(self.k_proj)) + w(self.k_bias)
        v = jnp.einsum("BSD,DKH->BSKH", x, w(self.v_proj)) + w(self.v_bias)
        q, k = apply_rope(q, positions, *rope), apply_rope(k, positions, *rope)
        b, t = x.shape[:2]
        offset = 0
        new_cache = None
        if cache is not None:
            offset = cache["end_index"][0]
            index = (0, offset % cache["k"].shape[1], 0, 0)
            k = jax.lax.dynamic_update_slice(cache["k"], k.astype(cache["k"].dtype), index)
            v = jax.lax.dynamic_update_slice(cache["v"], v.astype(cache["v"].dtype), index)
            new_cache = {"k": k, "v": v, "end_index": cache["end_index"] + t}
        kh, g = cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads
        q = q.reshape(b, t, kh, g, cfg.head_dim)
        logits = jnp.einsum("BTKGH,BSKH->BKGTS", q, k.astype(dt)).astype(jnp.float32) * cfg.head_dim**-0.5
        visible = jnp.ones((b, t, k.shape[1]), dtype=bool) if attn_mask is None else attn_mask.astype(bool)
        if self.window is not None:
            q_slot = offset + jnp.arange(t)[:, None]
            k_slot = jnp.arange(k.shape[1])[None, :]
            visible = visible & ((q_slot - k_slot) < self.window)[None]
        logits = jnp.where(visible[:, None, None], logits, K_MASK)
        sinks = self.sinks[...].astype(jnp.float32).reshape(1, kh, g, 1, 1)
        sinks = jnp.broadcast_to(sinks, (*logits.shape[:-1], 1))
        probs = jax.nn.softmax(jnp.concatenate([logits, sinks], axis=-1), axis=-1)[..., :-1]
        out = jnp.einsum("BKGTS,BSKH->BTKGH", probs.astype(dt), v.astype(dt)).reshape(b, t, cfg.num_heads, -1)
        return new_cache, jnp.einsum("BTNH,NHD->BTD", out, w(self.o_proj)) + w(self.o_bias)


class MoE(nnx.Module):
    """Top-k experts with clamped SwiGLU; gate_up holds gate and up columns interleaved (as published)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        e, d, f, s = cfg.num_experts, cfg.embed_dim, cfg.hidden_dim, cfg.shd_config
        self.cfg = cfg
        self.router_w = _param(rngs, (d, e), cfg.param_dtype, ("fsdp", None))
        self.router_b = _param(rngs, (e,), cfg.param_dtype, s.vector, "zeros")
        self.gate_up_proj = _param(rngs, (e, d, 2 * f), cfg.param_dtype, s.exp_weight_edf)
        self.gate_up_bias = _param(rngs, (e, 2 * f), cfg.param_dtype, s.exp_bias_ef, "zeros")
        self.down_proj = _param(rngs, (e, f, d), cfg.param_dtype, s.exp_weight_efd)
        self.down_bias = _param(rngs, (e, d), cfg.param_dtype, s.exp_bias_ed, "zeros")

    def __call__(self, x: jaxtyping.Array) -> jaxtyping.Array:
        cfg, dt = self.cfg, self.cfg.dtype
        b, t, d = x.shape
        flat = x.reshape(-1, d).astype(dt)
        router = flat @ self.router_w[...].astype(dt) + self.router_b[...].astype(dt)
        top_logits, top_idx = jax.lax.top_k(router.astype(jnp.float32), cfg.experts_per_token)
        weights = jax.nn.softmax(top_logits, axis=-1)  # [N, k]
        expert_of_row = top_idx.reshape(-1)  # each token appears k times
        order = jnp.argsort(expert_of_row)
        rows = jnp.repeat(flat, cfg.experts_per_token, axis=0)[order]
        experts = expert_of_row[order]
        sizes = jnp.bincount(experts, length=cfg.num_experts).astype(jnp.int32)
        gate_up = jax.lax.ragged_dot(rows, self.gate_up_proj[...].astype(dt), sizes)
        gate_up = gate_up + self.gate_up_bias[...].astype(dt)[experts]
        gate, up = gate_up[:, ::2], gate_up[:, 1::2]
        gate = jnp.minimum(gate, cfg.swiglu_limit)
        up = jnp.clip(up, -cfg.swiglu_limit, cfg.swiglu_limit)
        hidden = (up + 1) * gate * jax.nn.sigmoid(gate * cfg.swiglu_alpha)
        out = jax.lax.ragged_dot(hidden, self.down_proj[...].astype(dt), sizes)
        out = out + self.down_bias[...].astype(dt)[experts]
        out = jnp.zeros_like(out).at[order].set(out)  # back to token-major order
        out = out.reshape(-1, cfg.experts_per_token, d) * weights[..., None].astype(dt)
        return out.sum(axis=1).reshape(b, t, d)


class Embedder(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.input_embedding = _param(rngs, (cfg.vocab_size, cfg.embed_dim), cfg.param_dtype, cfg.shd_config.emb_vd)


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, layer: int, *, rngs: nnx.Rngs) -> None:
        self.cfg = cfg
        self.input_layernorm = RMSNorm(cfg.embed_dim, cfg, rngs=rngs)
        self.attn = Attention(cfg, layer, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.embed_dim, cfg, rngs=rngs)
        self.mlp = MoE(cfg, rngs=rngs)

    def block(self, x, positions, cache, attn_mask, rope):
        cache, h = self.attn(self.input_layernorm(x), positions, cache, attn_mask, rope)
        x = x + h
        return cache, x + self.mlp(self.post_attention_layernorm(x))

    def __call__(self, x, positions, cache, attn_mask, rope):
        if self.cfg.remat:
            # graph_updates=False: with graph updates, remat inside the sampler's while_loop (every rollout)
            # raised TraceContextError ("Cannot mutate Param from a different trace level")
            return nnx.remat(self.block.__func__, graph_updates=False)(self, x, positions, cache, attn_mask, rope)
        return self.block(x, positions, cache, attn_mask, rope)


class GptOss(nnx.Module):
    """gpt-oss decoder; parameters named like Tunix's models (embedder.input_embedding, layers.N.attn.*)."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs) -> None:
        cfg, s = config, config.shd_config
        self.config = cfg
        self.embedder = Embedder(cfg, rngs=rngs)
        self.layers = compat.ModuleList([DecoderLayer(cfg, i, rngs=rngs) for i in range(cfg.num_layers)])
        self.final_norm = RMSNorm(cfg.embed_dim, cfg, rngs=rngs)
        if not cfg.use_tied_embedding:
            self.lm_head = _param(rngs, (cfg.embed_dim, cfg.vocab_size), cfg.param_dtype, s.emb_dv)
        inv_freq, scale = rope_tables(cfg)
        self.rope_inv_freq, self.rope_scale = tuple(float(f) for f in inv_freq), scale

    def init_cache(self, batch_size: int, cache_size: int, dtype: Any) -> Cache:
        return empty_kv_cache(self.config, batch_size, cache_size, dtype)

    def __call__(
        self,
        input_tokens: jaxtyping.Array,
        positions: jaxtyping.Array,
        cache: Cache | None,
        attention_mask: jaxtyping.Array | None,
        output_hidden_states: bool = False,
    ) -> tuple[jaxtyping.Array, Cache | None]:
        cfg = self.config
        x = self.embedder.input_embedding[...][(input_tokens,)].astype(cfg.dtype)
        rope = (jnp.asarray(self.rope_inv_freq, jnp.float32), self.rope_scale)
        new_cache = None if cache is None else {}
        for i, layer in enumerate(self.layers):
            name = f"layer_{i}"
            layer_cache, x = layer(x, positions, cache[name] if cache else None, attention_mask, rope)
            if cache is not None:
                new_cache[name] = layer_cache
        x = self.final_norm(x)
        if output_hidden_states:
            self.sow(nnx.Intermediate, "all_hidden_states", x)
        head = self.embedder.input_embedding[...].T if cfg.use_tied_embedding else self.lm_head[...]
        logits = jnp.einsum("BTD,DV->BTV", x.astype(cfg.dtype), head.astype(cfg.dtype))
        return logits.astype(jnp.float32), new_cache

    def get_model_input(self) -> dict[str, Any]:
        """A dummy input (batch 2, one token) for qwix LoRA tracing, as Tunix's models provide."""
        return {
            "input_tokens": jnp.ones((2, 1), dtype=jnp.int32),
            "positions": jnp.ones((2, 1), dtype=jnp.int32),
            "cache": None,
            "attention_mask": jnp.ones((2, 1, 1), dtype=jnp.bool_),
        }
