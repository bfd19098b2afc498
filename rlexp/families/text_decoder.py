"""What Qwen3 and Llama 3 share as Tunix text decoders: the fields their config.json is checked on, and the
Hugging Face names of their nnx parameters (the inverse of Tunix's safetensors mappings). Pure Python."""

from __future__ import annotations

from typing import Any

from rlexp.config.schema import ModelConfig
from rlexp.families.spec import HfNames, Table, layer_table_names

COMMON_FIELDS = {
    "num_layers": "num_hidden_layers",
    "vocab_size": "vocab_size",
    "embed_dim": "hidden_size",
    "hidden_dim": "intermediate_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
}
ROPE_FIELDS = {**COMMON_FIELDS, "extra.rope_theta": "rope_theta", "extra.tie_word_embeddings": "tie_word_embeddings"}
ROPE_EXTRA = ("rope_theta", "norm_eps", "tie_word_embeddings")


def table(d: int) -> Table:
    return {
        "attn.q_proj.w": ("self_attn.q_proj.weight", lambda x: x.reshape(d, -1).T),
        "attn.k_proj.w": ("self_attn.k_proj.weight", lambda x: x.reshape(d, -1).T),
        "attn.v_proj.w": ("self_attn.v_proj.weight", lambda x: x.reshape(d, -1).T),
        "attn.o_proj.w": ("self_attn.o_proj.weight", lambda x: x.reshape(-1, d).T),
        "attn.q_norm.w": ("self_attn.q_norm.weight", lambda x: x),
        "attn.k_norm.w": ("self_attn.k_norm.weight", lambda x: x),
        "mlp.gate_proj.kernel": ("mlp.gate_proj.weight", lambda x: x.T),
        "mlp.up_proj.kernel": ("mlp.up_proj.weight", lambda x: x.T),
        "mlp.down_proj.kernel": ("mlp.down_proj.weight", lambda x: x.T),
        "input_layernorm.w": ("input_layernorm.weight", lambda x: x),
        "post_attention_layernorm.w": ("post_attention_layernorm.weight", lambda x: x),
    }


def hf_names(m: ModelConfig, key: str, v: Any, prefix: str) -> HfNames | None:
    return layer_table_names(m, key, v, prefix, table)
