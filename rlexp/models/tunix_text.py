"""Qwen3 and Llama 3 through Tunix's implementations and safetensors loaders, with the checkpoint's RoPE.

Tunix 0.1.7's qwen3 and llama3 attention call a module-level `apply_rope` with its default
theta (1e6) and no frequency scaling, whatever the config says. Llama 3.1 uses theta 5e5 with
"llama3" scaling, Qwen3-2507 uses 5e6, so their logits would silently differ from the reference.
The model classes below keep Tunix's modules and parameter layout; while one of them runs, its
RoPE frequencies are published to the fixed `apply_rope` (`rlexp.fixes.tunix_rope`). Building one installs
Tunix's fixes (`rlexp.fixes.apply`); importing this module patches nothing.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp
import numpy as np
from tunix.models.llama3 import model as llama3_lib
from tunix.models.qwen3 import model as qwen3_lib

from rlexp import fixes
from rlexp.config.schema import ModelConfig
from rlexp.fixes.tunix_rope import rope_frequencies
from rlexp.models.checkpoint import load_with_tunix
from rlexp.tunix.checkpoints import llama3_checkpoint_mapping, qwen3_checkpoint_mapping


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None = None) -> tuple[float, ...]:
    """Rotation frequency of each of the head_dim/2 pairs, as Hugging Face computes them."""
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_ctx = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old_ctx / low, inv / factor, inv)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
        inv = np.where(medium, smoothed, scaled)
    elif kind not in (None, "default"):
        raise ValueError(f"rope_type {kind!r} is not supported for this family")
    return tuple(float(x) for x in inv.astype(np.float32))


class _RopeScope:
    rope_inv_freq: tuple[float, ...]

    def __call__(self, *args, **kwargs):
        with rope_frequencies(self.rope_inv_freq, getattr(self.config, "rope_positions", 0)):
            return super().__call__(*args, **kwargs)


@dataclasses.dataclass(slots=True)
class Qwen3Config(qwen3_lib.ModelConfig):
    rope_positions: int = 0  # positions a run can reach (model.max_context): RoPE's table on CPU; 0 = none


class Qwen3(_RopeScope, qwen3_lib.Qwen3):
    """Tunix's Qwen3 with the checkpoint's RoPE theta."""

    def __init__(self, config: qwen3_lib.ModelConfig, *, rngs: Any) -> None:
        fixes.apply()
        super().__init__(config, rngs=rngs)
        self.rope_inv_freq = rope_inv_freq(config.head_dim, config.rope_theta)


@dataclasses.dataclass(frozen=True)
class Llama3Config(llama3_lib.ModelConfig):
    rope_scaling: tuple[tuple[str, Any], ...] = ()  # Hugging Face rope_scaling items
    rope_positions: int = 0  # as Qwen3Config's


class Llama3(_RopeScope, llama3_lib.Llama3):
    """Tunix's Llama3 with the checkpoint's RoPE theta and llama3 frequency scaling."""

    def __init__(self, config: llama3_lib.ModelConfig, *, rngs: Any) -> None:
        fixes.apply()
        super().__init__(config, rngs=rngs)
        scaling = dict(getattr(config, "rope_scaling", ()))
        self.rope_inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, scaling)

    def init_cache(self, batch_size: int, cache_size: int, dtype: Any) -> dict[str, Any]:
        """The Sampler's KV cache (Tunix's llama3 has no init_cache and falls back to a deprecated path)."""
        return empty_kv_cache(self.config, batch_size, cache_size, dtype)


def jnp_dtype(name: str) -> Any:
    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[name]


def empty_kv_cache(c: Any, batch_size: int, cache_size: int, dtype: Any) -> dict[str, Any]:
    """Tunix's sampler cache layout: per layer k, v [batch, cache, kv_heads, head_dim] and end_index."""
    shape = (batch_size, cache_size, c.num_kv_heads, c.head_dim)
    return {
        f"layer_{i}": {
            "k": jnp.zeros(shape, dtype=dtype),
            "v": jnp.zeros(shape, dtype=dtype),
            "end_index": jnp.zeros((batch_size,), dtype=jnp.int32),
        }
        for i in range(c.num_layers)
    }


DECODER_DIMS = ("num_layers", "vocab_size", "embed_dim", "hidden_dim", "num_heads", "head_dim", "num_kv_heads")


def decoder_dims(m: ModelConfig) -> dict[str, int]:
    """The dimensions every decoder's Tunix-style ModelConfig takes under the same names as rlexp's."""
    return {k: getattr(m, k) for k in DECODER_DIMS}


def _common(m: ModelConfig) -> dict[str, Any]:
    x = m.extra
    return dict(
        **decoder_dims(m),
        rope_theta=x["rope_theta"],
        norm_eps=x["norm_eps"],
        rope_positions=m.max_context,  # validated: prompt + completion tokens never exceed it
    )


def qwen3_config(m: ModelConfig) -> Qwen3Config:
    x = m.extra
    remat = qwen3_lib.RematConfig.DECODER if m.remat == "full" else qwen3_lib.RematConfig.NONE
    experts = int(x.get("num_experts") or 0)  # Qwen3-MoE: every layer's MLP is routed experts of hidden_dim
    return Qwen3Config(
        **_common(m),
        num_experts=experts or None,
        num_experts_per_tok=int(x["experts_per_token"]) if experts else None,
        use_tied_embedding=bool(x["tie_word_embeddings"]),
        remat_config=remat,
        dtype=jnp_dtype(m.dtype),
        param_dtype=jnp_dtype(m.param_dtype),
    )


def llama3_config(m: ModelConfig) -> Llama3Config:
    x = m.extra
    remat = llama3_lib.RematConfig.DECODER if m.remat == "full" else llama3_lib.RematConfig.NONE
    scaling = tuple(sorted(dict(x.get("rope_scaling") or {}).items()))
    return Llama3Config(
        **_common(m), weight_tying=bool(x["tie_word_embeddings"]), remat_config=remat, rope_scaling=scaling
    )


def create_qwen3(m: ModelConfig, ckpt_dir: str, mesh: Any = None) -> Any:
    """Load a Qwen3 (or Qwen3-MoE) checkpoint in Hugging Face layout."""
    mapping, pre = qwen3_checkpoint_mapping()
    return _load(m, ckpt_dir, mesh, Qwen3, qwen3_config(m), mapping, pre)


def create_llama3(m: ModelConfig, ckpt_dir: str, mesh: Any = None) -> Any:
    """Load a Llama 3 checkpoint in Hugging Face layout."""
    return _load(m, ckpt_dir, mesh, Llama3, llama3_config(m), llama3_checkpoint_mapping(), None)


def _load(m: ModelConfig, ckpt_dir: str, mesh: Any, cls: type, cfg: Any, mapping: Any, pre: Any) -> Any:
    # llama3 in Tunix has no compute-dtype knob: its weights are held in model.param_dtype
    return load_with_tunix(ckpt_dir, cls, cfg, mapping, mesh=mesh, preprocess_fn=pre, dtype=jnp_dtype(m.param_dtype))
