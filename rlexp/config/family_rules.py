"""Model families as config knowledge: which `model.extra` fields each family needs and which config.json
keys its option must match. Pure Python; a checkpoint's config.json is checked against these in
rlexp.models.hf_config, and rlexp.models.builders turns a family into a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlexp.config.schema import ModelConfig
from rlexp.errors import ConfigError


@dataclass(frozen=True)
class Family:
    name: str
    hf_model_types: tuple[str, ...]  # config.json "model_type" values this family loads
    required_extra: tuple[str, ...]
    # option field or extra key -> config.json key, compared when a checkpoint is loaded
    hf_fields: dict[str, str] = field(default_factory=dict)
    # replacing hf_fields entries for a mixture-of-experts option (one with extra.num_experts)
    moe_fields: dict[str, str] = field(default_factory=dict)
    # config.json values a mixture-of-experts checkpoint must have for this family's implementation
    moe_required: dict[str, object] = field(default_factory=dict)


_COMMON = {
    "num_layers": "num_hidden_layers",
    "vocab_size": "vocab_size",
    "embed_dim": "hidden_size",
    "hidden_dim": "intermediate_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
}

FAMILIES: dict[str, Family] = {
    "qwen3": Family(
        "qwen3",
        ("qwen3", "qwen3_moe"),
        ("rope_theta", "norm_eps", "tie_word_embeddings"),
        {**_COMMON, "extra.rope_theta": "rope_theta", "extra.tie_word_embeddings": "tie_word_embeddings"},
        # Qwen3-MoE: hidden_dim is each expert's width; Tunix routes every layer and renormalises the top-k
        {
            "hidden_dim": "moe_intermediate_size",
            "extra.num_experts": "num_local_experts",
            "extra.experts_per_token": "num_experts_per_tok",
        },
        {"norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []},
    ),
    "llama3": Family(
        "llama3",
        ("llama",),
        ("rope_theta", "norm_eps", "tie_word_embeddings"),
        {**_COMMON, "extra.rope_theta": "rope_theta", "extra.tie_word_embeddings": "tie_word_embeddings"},
    ),
    "gemma4": Family(
        "gemma4",
        ("gemma4", "gemma4_text"),
        ("global_head_dim", "per_layer_input_dim", "num_kv_shared_layers", "sliding_window", "sliding_window_pattern"),
        {
            **_COMMON,
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
        {
            "extra.num_experts": "num_experts",
            "extra.experts_per_token": "top_k_experts",
            "extra.expert_dim": "moe_intermediate_size",
        },
        {"enable_moe_block": True},
    ),
    "gpt_oss": Family(
        "gpt_oss",
        ("gpt_oss",),
        ("num_experts", "experts_per_token", "sliding_window", "rope_theta"),
        {
            **_COMMON,
            "extra.num_experts": "num_local_experts",
            "extra.experts_per_token": "num_experts_per_tok",
            "extra.sliding_window": "sliding_window",
            "extra.rope_theta": "rope_theta",
        },
    ),
}


def family_of(m: ModelConfig) -> Family:
    if m.family not in FAMILIES:
        raise ConfigError("model.family", m.family, f"use one of {', '.join(FAMILIES)}")
    return FAMILIES[m.family]


def hub_id_instruction_tuned(hf_id: str) -> bool | None:
    """Whether a hub id names an instruction-tuned release, from naming conventions; None if unknown."""
    name = hf_id.rsplit("/", 1)[-1].lower()
    if name.endswith("-it") or "instruct" in name or "-chat" in name or name.startswith("gpt-oss"):
        return True
    if "base" in name.split("-") or name.endswith("-base"):
        return False
    if name.startswith("qwen3-"):
        return True  # Qwen3 post-trained releases carry no suffix; pretrained ones end in -Base
    if name.startswith(("gemma-4-", "llama-3")):
        return False  # base releases carry no suffix; tuned ones end in -it / -Instruct
    return None


def check_source(m: ModelConfig) -> None:
    """A model option must say where its weights are."""
    if not (m.path or m.hf_id):
        raise ConfigError("model.path", m.path, "set model.path (folder or gs://) or model.hf_id")


def check_model_option(m: ModelConfig) -> None:
    """Rules on a model option that need no checkpoint (run by config validation)."""
    check_source(m)
    fam = family_of(m)
    missing = [k for k in fam.required_extra if k not in (m.extra or {})]
    if missing:
        need = ", ".join(f"extra.{k}" for k in missing)
        raise ConfigError("model.extra", sorted(m.extra or {}), f"family {fam.name} needs {need}")
    if m.hf_id and not m.path:
        tuned = hub_id_instruction_tuned(m.hf_id)
        if tuned is not None and tuned != m.instruction_tuned:
            kind = "an instruction-tuned" if tuned else "a base (pretrained)"
            raise ConfigError(
                "model.instruction_tuned",
                m.instruction_tuned,
                f"model.hf_id={m.hf_id} is {kind} checkpoint; set model.instruction_tuned={str(tuned).lower()} "
                "or pick the other hub id",
            )
    if m.num_heads % m.num_kv_heads:
        raise ConfigError("model.num_kv_heads", m.num_kv_heads, f"must divide model.num_heads={m.num_heads}")
