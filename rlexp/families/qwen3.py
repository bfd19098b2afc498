"""Qwen3 and Qwen3-MoE (Tunix's qwen3 model): the family's registered spec.

Dense layers carry q and k norms; a MoE option (extra.num_experts) routes every layer's MLP to experts of width
hidden_dim, which Tunix splits over FSDP and renormalises top-k (the checkpoint must agree: `moe_required`). The
only family whose Tunix model hands out its final hidden states, so PPO's critic is built on it.
"""

from __future__ import annotations

from typing import Any

from rlexp.config.schema import ModelConfig
from rlexp.families import text_decoder
from rlexp.families.hf_config import rope_extra
from rlexp.families.registry import register
from rlexp.families.spec import (
    FamilySpec,
    Layer,
    attention_params,
    dense_mlp_params,
    routed_experts_params,
    unrouted_experts_params,
)


def _build(m: ModelConfig, ckpt_dir: str, mesh: Any) -> Any:
    from rlexp.models import tunix_text

    return tunix_text.create_qwen3(m, ckpt_dir, mesh)


def _tunix_config(m: ModelConfig) -> Any:
    from rlexp.models import tunix_text

    return tunix_text.qwen3_config(m)


def _from_hf(m: ModelConfig, tc: dict[str, Any], hf: dict[str, Any]) -> None:
    rope_extra(m, tc, hf)
    if tc["model_type"] == "qwen3_moe":
        m.hidden_dim = tc["moe_intermediate_size"]
        m.extra.update(
            num_experts=tc.get("num_local_experts", tc.get("num_experts")), experts_per_token=tc["num_experts_per_tok"]
        )


def _layer_params(m: ModelConfig, layer: Layer) -> int:
    moe = (m.extra or {}).get("num_experts")  # Qwen3-MoE: a router, experts of width hidden_dim
    mlp = routed_experts_params(m, layer.hidden) if moe else dense_mlp_params(m, layer)
    return attention_params(m, layer) + mlp + 2 * m.embed_dim + 2 * layer.head_dim  # two norms, q and k norms


def _inactive_params(m: ModelConfig) -> int:
    return unrouted_experts_params(m, m.hidden_dim) if (m.extra or {}).get("num_experts") else 0


SPEC = register(
    FamilySpec(
        name="qwen3",
        hf_model_types=("qwen3", "qwen3_moe"),
        build=_build,
        tunix_config=_tunix_config,
        from_hf=_from_hf,
        required_extra=text_decoder.ROPE_EXTRA,
        hf_fields=text_decoder.ROPE_FIELDS,
        # Qwen3-MoE: hidden_dim is each expert's width; Tunix routes every layer and renormalises the top-k
        moe_fields={
            "hidden_dim": "moe_intermediate_size",
            "extra.num_experts": "num_local_experts",
            "extra.experts_per_token": "num_experts_per_tok",
        },
        moe_required={"norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []},
        layer_params=_layer_params,
        inactive_params=_inactive_params,
        hf_names=text_decoder.hf_names,
        critic=True,
        experts_over_fsdp=True,
        hub_prefixes=("qwen3-",),
        hub_plain_tuned=True,  # Qwen3 post-trained releases carry no suffix; pretrained ones end in -Base
    )
)
