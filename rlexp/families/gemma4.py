"""Gemma 4 (E2B, E4B, 26B-A4B; rlexp.models.gemma4 over Tunix's gemma4 model): the family's registered spec.

Its layers differ one from another: every `sliding_window_pattern`-th layer (and the last) attends globally with
`global_head_dim` (26B-A4B: fewer KV heads, values equal to the keys), the others keep a sliding window of keys in
the cache; the last `num_kv_shared_layers` reuse an earlier layer's cache (and, with `use_double_wide_mlp`, have a
double-width MLP). Per-layer input embeddings (`per_layer_input_dim`) are lookups a token does not multiply
through; a MoE option adds routed experts of `expert_dim` beside the dense MLP, split over FSDP by Tunix.
"""

from __future__ import annotations

import re
from typing import Any

from rlexp.config.schema import ModelConfig
from rlexp.errors import RlexpError
from rlexp.families.hf_config import tied_embeddings
from rlexp.families.registry import register
from rlexp.families.spec import FamilySpec, HfNames, Layer, attention_params, dense_mlp_params
from rlexp.families.text_decoder import COMMON_FIELDS


def _build(m: ModelConfig, ckpt_dir: str, mesh: Any) -> Any:
    from rlexp.models import gemma4

    return gemma4.create(m, ckpt_dir, mesh)


def _tunix_config(m: ModelConfig) -> Any:
    from rlexp.models import gemma4

    return gemma4.tunix_config(m)


def _from_hf(m: ModelConfig, tc: dict[str, Any], hf: dict[str, Any]) -> None:
    rope = tc.get("rope_parameters") or {}
    types = tc.get("layer_types") or []
    period = (types.index("full_attention") + 1) if "full_attention" in types else 6
    full = rope.get("full_attention", {})
    m.extra = {
        "global_head_dim": tc.get("global_head_dim", 512),
        "per_layer_input_dim": tc.get("hidden_size_per_layer_input") or 0,
        "num_kv_shared_layers": tc.get("num_kv_shared_layers", 0),
        "sliding_window": tc["sliding_window"],
        "sliding_window_pattern": period,
        "final_logit_softcap": tc.get("final_logit_softcapping"),
        "local_rope_theta": rope.get("sliding_attention", {}).get("rope_theta", 10000.0),
        "global_rope_theta": full.get("rope_theta", 1e6),
        "global_rope_proportion": full.get("partial_rotary_factor", 1.0),
        "use_double_wide_mlp": bool(tc.get("use_double_wide_mlp", False)),
        "norm_eps": tc.get("rms_norm_eps", 1e-6),
        "tie_word_embeddings": tied_embeddings(hf),
        "attention_k_eq_v": bool(tc.get("attention_k_eq_v", False)),
    }
    if tc.get("num_global_key_value_heads"):
        m.extra["num_global_kv_heads"] = tc["num_global_key_value_heads"]
    if tc.get("enable_moe_block"):
        m.extra.update(
            num_experts=tc["num_experts"], experts_per_token=tc["top_k_experts"], expert_dim=tc["moe_intermediate_size"]
        )


def _layers(m: ModelConfig) -> list[Layer]:
    x = m.extra
    period = int(x.get("sliding_window_pattern", 6))
    shared_from = m.num_layers - int(x.get("num_kv_shared_layers", 0))
    out = []
    for i in range(m.num_layers):
        is_global = (i + 1) % period == 0 or i == m.num_layers - 1
        out.append(
            Layer(
                head_dim=int(x.get("global_head_dim", m.head_dim)) if is_global else m.head_dim,
                hidden=m.hidden_dim * (2 if x.get("use_double_wide_mlp") and i >= shared_from else 1),
                # 26B-A4B: global layers have fewer KV heads, and no value projection (values are the keys)
                kv_heads=int(x.get("num_global_kv_heads") or m.num_kv_heads) if is_global else m.num_kv_heads,
                cache_window=None if is_global else int(x["sliding_window"]),
                has_kv=i < shared_from,  # KV-shared layers reuse an earlier layer's cache
                k_eq_v=bool(is_global and x.get("attention_k_eq_v")),
            )
        )
    return out


def _layer_params(m: ModelConfig, layer: Layer) -> int:
    x, d = m.extra or {}, m.embed_dim
    mlp = dense_mlp_params(m, layer)
    p = int(x.get("per_layer_input_dim", 0))
    if p:
        mlp += 2 * d * p + d  # per-layer input gate, projection, norm
    if x.get("num_experts"):  # router (+ its scale, per-expert scales), experts, their three norms
        e, fe = int(x["num_experts"]), int(x["expert_dim"])
        mlp += d * e + d + e + e * 3 * d * fe + 3 * d
    # input/post-attention norms, q and k norms, pre/post feed-forward norms, layer scalar
    norms = 2 * d + 2 * layer.head_dim + 2 * d + 1
    return attention_params(m, layer) + mlp + norms


def _extra_params(m: ModelConfig) -> int:
    """The per-layer input embeddings and their projection (and its norm)."""
    p, d = int((m.extra or {}).get("per_layer_input_dim") or 0), m.embed_dim
    return m.vocab_size * m.num_layers * p + d * m.num_layers * p + p if p else 0


def _inactive_params(m: ModelConfig) -> int:
    x = m.extra or {}
    n = 0
    if x.get("num_experts"):
        e, k = int(x["num_experts"]), int(x["experts_per_token"])
        n += m.num_layers * (e - k) * 3 * m.embed_dim * int(x.get("expert_dim", m.hidden_dim))
    if x.get("per_layer_input_dim"):
        n += m.vocab_size * m.num_layers * int(x["per_layer_input_dim"])  # per-layer embeddings are lookups
    return n


def _hf_names(m: ModelConfig, key: str, v: Any, prefix: str) -> HfNames | None:
    d, layers = m.embed_dim, m.num_layers
    emb = {
        "embedder.per_layer_input_embedding": ("embed_tokens_per_layer.weight", lambda x: x.reshape(x.shape[0], -1)),
        "embedder.per_layer_model_projection.w": ("per_layer_model_projection.weight", lambda x: x.reshape(d, -1).T),
        "embedder.per_layer_projection_norm.scale": ("per_layer_projection_norm.weight", lambda x: x),
    }
    if key in emb:
        name, fn = emb[key]
        return [(prefix + name, fn(v))]
    match = re.fullmatch(r"layers\.(\d+)\.(.+)", key)
    if not match:
        return None
    i, rest = match.groups()
    p = f"{prefix}layers.{i}."
    shared = int(i) >= layers - int(m.extra.get("num_kv_shared_layers", 0))
    if rest == "attn.kv_einsum.w":  # [2, K, D, H] -> k_proj, v_proj [K*H, D]; shared layers have none
        if shared:
            return []
        return [(p + f"self_attn.{n}_proj.weight", v[j].transpose(0, 2, 1).reshape(-1, d)) for j, n in enumerate("kv")]
    if rest == "attn._key_norm.scale":
        return [] if shared else [(p + "self_attn.k_norm.weight", v)]
    table = {
        "attn.q_einsum.w": ("self_attn.q_proj.weight", lambda x: x.transpose(0, 2, 1).reshape(-1, d)),
        "attn.attn_vec_einsum.w": ("self_attn.o_proj.weight", lambda x: x.reshape(-1, d).T),
        "attn._query_norm.scale": ("self_attn.q_norm.weight", lambda x: x),
        "mlp.gate_proj.kernel": ("mlp.gate_proj.weight", lambda x: x.T),
        "mlp.up_proj.kernel": ("mlp.up_proj.weight", lambda x: x.T),
        "mlp.down_proj.kernel": ("mlp.down_proj.weight", lambda x: x.T),
        "pre_attention_norm.scale": ("input_layernorm.weight", lambda x: x),
        "post_attention_norm.scale": ("post_attention_layernorm.weight", lambda x: x),
        "pre_ffw_norm.scale": ("pre_feedforward_layernorm.weight", lambda x: x),
        "post_ffw_norm.scale": ("post_feedforward_layernorm.weight", lambda x: x),
        "skip_scale": ("layer_scalar", lambda x: x),
        "per_layer_input_gate.w": ("per_layer_input_gate.weight", lambda x: x.T),
        "per_layer_projection.w": ("per_layer_projection.weight", lambda x: x.T),
        "post_per_layer_input_norm.scale": ("post_per_layer_input_norm.weight", lambda x: x),
    }
    if rest not in table:
        raise RlexpError(f"export of gemma4 does not know parameter {key}")
    name, fn = table[rest]
    return [(p + name, fn(v))]


SPEC = register(
    FamilySpec(
        name="gemma4",
        hf_model_types=("gemma4", "gemma4_text"),
        build=_build,
        tunix_config=_tunix_config,
        from_hf=_from_hf,
        required_extra=(
            "global_head_dim",
            "per_layer_input_dim",
            "num_kv_shared_layers",
            "sliding_window",
            "sliding_window_pattern",
        ),
        hf_fields={
            **COMMON_FIELDS,
            "extra.global_head_dim": "global_head_dim",
            "extra.per_layer_input_dim": "hidden_size_per_layer_input",
            "extra.num_kv_shared_layers": "num_kv_shared_layers",
            "extra.sliding_window": "sliding_window",
            "extra.final_logit_softcap": "final_logit_softcapping",
            "extra.use_double_wide_mlp": "use_double_wide_mlp",
            "extra.attention_k_eq_v": "attention_k_eq_v",
            "extra.num_global_kv_heads": "num_global_key_value_heads",
        },
        # Gemma 4 MoE (26B-A4B): hidden_dim stays the dense MLP's width, expert_dim is each expert's
        moe_fields={
            "extra.num_experts": "num_experts",
            "extra.experts_per_token": "top_k_experts",
            "extra.expert_dim": "moe_intermediate_size",
        },
        moe_required={"enable_moe_block": True},
        layers=_layers,
        layer_params=_layer_params,
        extra_params=_extra_params,
        inactive_params=_inactive_params,
        hf_names=_hf_names,
        experts_over_fsdp=True,
        hub_prefixes=("gemma-4-",),
        hub_plain_tuned=False,  # base releases carry no suffix; tuned ones end in -it
    )
)
