"""Gemma 4 (E2B, E4B, 26B-A4B) through Tunix's gemma4 model and safetensors mapping.

Three gaps between Tunix 0.1.7 and Hugging Face checkpoints are closed here:
- text-only checkpoints (`Gemma4ForCausalLM`) name weights `model.layers.*`; Tunix's mapping only
  accepts the multimodal `model.language_model.layers.*` (or bare `layers.*`);
- KV-shared layers have no k/v projections or k norm in the checkpoint (they reuse an earlier
  layer's keys and values), but Tunix allocates them: they are filled with unused placeholders;
- Tunix derives the first shared layer as int(num_layers * (1 - frac)), which float rounding can
  move by one; the fraction passed here is nudged so it lands exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tunix.models.gemma4 import model as gemma4_lib

from rlexp import fixes
from rlexp.config.schema import ModelConfig
from rlexp.errors import ConfigError
from rlexp.models.checkpoint import load_with_tunix
from rlexp.models.tunix_text import jnp_dtype
from rlexp.tunix.checkpoints import gemma4_checkpoint_mapping

_TUNIX_EPS = 1e-6  # Tunix's gemma4 RMSNorm epsilon is fixed


def layer_types(m: ModelConfig) -> list[gemma4_lib.AttentionType]:
    period = int(m.extra["sliding_window_pattern"])
    types = [
        gemma4_lib.AttentionType.GLOBAL if (i + 1) % period == 0 else gemma4_lib.AttentionType.LOCAL_SLIDING
        for i in range(m.num_layers)
    ]
    types[-1] = gemma4_lib.AttentionType.GLOBAL  # the last layer always attends globally
    return types


def tunix_config(m: ModelConfig) -> gemma4_lib.ModelConfig:
    x = m.extra
    if float(x.get("norm_eps", _TUNIX_EPS)) != _TUNIX_EPS:
        raise ConfigError("model.extra.norm_eps", x["norm_eps"], f"Tunix's gemma4 uses {_TUNIX_EPS}")
    if not x.get("tie_word_embeddings", True):
        raise ConfigError("model.extra.tie_word_embeddings", False, "gemma4 ties input and output embeddings")
    types = layer_types(m)
    period = int(x["sliding_window_pattern"])
    if m.num_layers % period:
        raise ConfigError("model.num_layers", m.num_layers, f"must be a multiple of sliding_window_pattern={period}")
    shared = int(x.get("num_kv_shared_layers", 0))
    first_shared = m.num_layers - shared
    if shared:
        # Tunix lets shared layers reuse layer first_shared-1 (global) and first_shared-2 (local)
        donors = types[first_shared - 2 : first_shared]
        if donors != [gemma4_lib.AttentionType.LOCAL_SLIDING, gemma4_lib.AttentionType.GLOBAL]:
            raise ConfigError(
                "model.extra.num_kv_shared_layers", shared, "the last two unshared layers must be local then global"
            )
    frac = (shared - 0.25) / m.num_layers if shared else 0.0
    assert int(m.num_layers - frac * m.num_layers) == first_shared
    hidden = m.hidden_dim
    return gemma4_lib.ModelConfig(
        num_layers=m.num_layers,
        num_embed=m.vocab_size,
        embed_dim=m.embed_dim,
        hidden_dim=hidden,
        num_heads=m.num_heads,
        head_dim=m.head_dim,
        num_kv_heads=m.num_kv_heads,
        final_logit_softcap=x.get("final_logit_softcap"),
        sliding_window_size=int(x["sliding_window"]),
        per_layer_input_dim=int(x.get("per_layer_input_dim", 0)),
        global_key_size=int(x.get("global_head_dim", m.head_dim)),
        attention_pattern=tuple(types[:period]),
        frac_shared_layers=frac,
        global_rope_proportion=float(x.get("global_rope_proportion", 0.25)),
        local_rope_proportion=1.0,
        override_kv_shared_ffw_hidden=2 * hidden if x.get("use_double_wide_mlp") else None,
        local_base_frequency=x.get("local_rope_theta", 10_000),
        global_base_frequency=x.get("global_rope_theta", 1_000_000),
        remat_config=gemma4_lib.RematConfig.DECODER if m.remat == "full" else gemma4_lib.RematConfig.NONE,
        dtype=jnp_dtype(m.dtype),
        param_dtype=jnp_dtype(m.param_dtype),
        **_moe_fields(m),
    )


def _moe_fields(m: ModelConfig) -> dict[str, Any]:
    """Gemma 4 26B-A4B: a routed-expert block beside the dense MLP in every layer, and global layers whose
    values are their keys (attention_k_eq_v) over fewer KV heads."""
    x = m.extra
    out: dict[str, Any] = {"k_eq_v_global": bool(x.get("attention_k_eq_v", False))}
    if x.get("num_global_kv_heads"):
        out["num_global_kv_heads"] = int(x["num_global_kv_heads"])
    if x.get("num_experts"):
        out.update(
            enable_moe=True,
            num_experts=int(x["num_experts"]),
            num_experts_per_tok=int(x["experts_per_token"]),
            expert_dim=int(x["expert_dim"]),
            moe_dense_hidden_dim=m.hidden_dim,
        )
    return out


def _key_mapping(cfg: gemma4_lib.ModelConfig) -> dict[str, Any]:
    prefix = r"(?:model\.language_model\.)?"
    return {
        pat.replace(prefix, r"(?:model\.language_model\.|model\.)?"): v
        for pat, v in gemma4_checkpoint_mapping()[0](cfg).items()
    }


def _preprocess(m: ModelConfig, cfg: gemma4_lib.ModelConfig):
    tunix_pre = gemma4_checkpoint_mapping()[1](cfg)
    types = layer_types(m)
    first_shared = m.num_layers - int(m.extra.get("num_kv_shared_layers", 0))
    dtype = np.dtype(jnp_dtype(m.param_dtype))

    def preprocess(tensors: dict[str, Any]) -> dict[str, Any]:
        out = tunix_pre(tensors)
        for i in range(first_shared, m.num_layers):
            is_global = types[i] == gemma4_lib.AttentionType.GLOBAL
            head = cfg.global_key_size if is_global else cfg.head_dim
            out.setdefault(f"layers.{i}.attn.kv_einsum.w", np.zeros((2, cfg.num_kv_heads, cfg.embed_dim, head), dtype))
            out.setdefault(f"layers.{i}.attn._key_norm.scale", np.ones((head,), dtype))
        return out

    return preprocess


def create(m: ModelConfig, ckpt_dir: str, mesh: Any = None) -> gemma4_lib.Gemma4:
    fixes.apply()  # its projections keep their dtype under LoRA (rlexp.fixes.tunix_lora_dtype)
    cfg = tunix_config(m)
    return load_with_tunix(
        ckpt_dir,
        gemma4_lib.Gemma4,
        cfg,
        _key_mapping,
        mesh=mesh,
        preprocess_fn=_preprocess(m, cfg),
        dtype=jnp_dtype(m.param_dtype),
    )
