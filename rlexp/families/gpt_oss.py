"""gpt-oss (rlexp.models.gpt_oss, rlexp's own JAX implementation): the family's registered spec.

Every layer's MLP is experts of width hidden_dim with biases (a fused gate-up projection) behind a biased router;
attention has biases and a learned sink per head, and alternates sliding (even layers) and full attention, but the
rollout's cache keeps every position on both. Experts are not Linear layers, so LoRA adapts attention only. The
published checkpoints hold MXFP4 experts, which the export writes back dequantised.
"""

from __future__ import annotations

from typing import Any

from rlexp.config.schema import ModelConfig
from rlexp.families.hf_config import rope_extra
from rlexp.families.registry import register
from rlexp.families.spec import FamilySpec, HfNames, Layer, Table, attention_params, layer_table_names
from rlexp.families.text_decoder import COMMON_FIELDS


def _build(m: ModelConfig, ckpt_dir: str, mesh: Any) -> Any:
    from rlexp.models.gpt_oss import params

    return params.create(m, ckpt_dir, mesh)


def _tunix_config(m: ModelConfig) -> Any:
    from rlexp.models.gpt_oss import params

    return params.tunix_config(m)


def _from_hf(m: ModelConfig, tc: dict[str, Any], hf: dict[str, Any]) -> None:
    rope_extra(m, tc, hf)
    m.extra.update(
        num_experts=tc["num_local_experts"],
        experts_per_token=tc["num_experts_per_tok"],
        sliding_window=tc["sliding_window"],
        swiglu_limit=tc.get("swiglu_limit", 7.0),
    )
    if tc.get("layer_types"):
        m.extra["layer_types"] = list(tc["layer_types"])


def _expert_params(m: ModelConfig) -> int:
    """One expert: gate-up and down projections with their biases."""
    d, f = m.embed_dim, m.hidden_dim
    return d * 2 * f + 2 * f + f * d + d


def _layer_params(m: ModelConfig, layer: Layer) -> int:
    d, n, h, k = m.embed_dim, m.num_heads, layer.head_dim, layer.kv_heads
    e = int(m.extra["num_experts"])
    attn = attention_params(m, layer) + n * h + 2 * k * h + d + n  # q/k/v/o biases and per-head sinks
    mlp = d * e + e + e * _expert_params(m)  # biased router, experts
    return attn + mlp + 2 * d


def _inactive_params(m: ModelConfig) -> int:
    e, k = int(m.extra["num_experts"]), int(m.extra["experts_per_token"])
    return m.num_layers * (e - k) * _expert_params(m)


def _table(d: int) -> Table:
    return {
        "attn.q_proj": ("self_attn.q_proj.weight", lambda x: x.reshape(d, -1).T),
        "attn.k_proj": ("self_attn.k_proj.weight", lambda x: x.reshape(d, -1).T),
        "attn.v_proj": ("self_attn.v_proj.weight", lambda x: x.reshape(d, -1).T),
        "attn.o_proj": ("self_attn.o_proj.weight", lambda x: x.reshape(-1, d).T),
        "attn.q_bias": ("self_attn.q_proj.bias", lambda x: x.reshape(-1)),
        "attn.k_bias": ("self_attn.k_proj.bias", lambda x: x.reshape(-1)),
        "attn.v_bias": ("self_attn.v_proj.bias", lambda x: x.reshape(-1)),
        "attn.o_bias": ("self_attn.o_proj.bias", lambda x: x),
        "attn.sinks": ("self_attn.sinks", lambda x: x),
        "mlp.router_w": ("mlp.router.weight", lambda x: x.T),
        "mlp.router_b": ("mlp.router.bias", lambda x: x),
        "mlp.gate_up_proj": ("mlp.experts.gate_up_proj", lambda x: x),
        "mlp.gate_up_bias": ("mlp.experts.gate_up_proj_bias", lambda x: x),
        "mlp.down_proj": ("mlp.experts.down_proj", lambda x: x),
        "mlp.down_bias": ("mlp.experts.down_proj_bias", lambda x: x),
        "input_layernorm.w": ("input_layernorm.weight", lambda x: x),
        "post_attention_layernorm.w": ("post_attention_layernorm.weight", lambda x: x),
    }


def _hf_names(m: ModelConfig, key: str, v: Any, prefix: str) -> HfNames | None:
    return layer_table_names(m, key, v, prefix, _table)


SPEC = register(
    FamilySpec(
        name="gpt_oss",
        hf_model_types=("gpt_oss",),
        build=_build,
        tunix_config=_tunix_config,
        from_hf=_from_hf,
        required_extra=("num_experts", "experts_per_token", "sliding_window", "rope_theta"),
        hf_fields={
            **COMMON_FIELDS,
            "extra.num_experts": "num_local_experts",
            "extra.experts_per_token": "num_experts_per_tok",
            "extra.sliding_window": "sliding_window",
            "extra.rope_theta": "rope_theta",
        },
        layer_params=_layer_params,
        inactive_params=_inactive_params,
        lora_mlp=lambda m: False,  # experts are not Linear layers
        hf_names=_hf_names,
        export_drops=("_blocks", "_scales"),  # MXFP4 experts are written back dequantised
        hub_prefixes=("gpt-oss",),
        hub_plain_tuned=True,  # every gpt-oss release is instruction-tuned
    )
)
