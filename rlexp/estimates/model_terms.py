"""The model's part of every estimate, from its family's spec (`rlexp.families`): its weights, the weights a token
passes through, LoRA's adapter weights, and the KV cache one sequence holds. The estimators (`memory`, `cost`,
`flops`) compose these with the trainer's terms; generic code never asks which family a model is. Pure Python.
"""

from __future__ import annotations

from rlexp.config.schema import ModelConfig
from rlexp.families.registry import family_of

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def param_count(m: ModelConfig) -> int:
    """Weights of the model option (biases and norms included), from its dimensions alone."""
    fam = family_of(m)
    d, v = m.embed_dim, m.vocab_size
    total = v * d + d  # embedding + final norm
    if not (m.extra or {}).get("tie_word_embeddings", False):
        total += v * d  # the LM head
    total += sum(fam.layer_params(m, layer) for layer in fam.layers(m))
    return total + fam.extra_params(m)


def active_params(m: ModelConfig) -> int:
    """Weights a token passes through: all but the input embedding lookups and the experts not routed to."""
    n = param_count(m) - m.vocab_size * m.embed_dim * (0 if m.extra.get("tie_word_embeddings") else 1)
    return max(n - family_of(m).inactive_params(m), 1)


def lora_param_count(m: ModelConfig, rank: int) -> int:
    """Adapter weights of rank `rank` on every attention and dense MLP projection."""
    fam = family_of(m)
    d, n, k = m.embed_dim, m.num_heads, m.num_kv_heads
    adapts_mlp = fam.lora_mlp(m)  # experts are not Linear layers
    total = 0
    for layer in fam.layers(m):
        h, f = layer.head_dim, layer.hidden
        total += rank * ((d + n * h) + 2 * (d + k * h) + (n * h + d))
        if adapts_mlp:
            total += rank * (2 * (d + f) + (f + d))
    return total


def kv_cache_bytes_per_sequence(m: ModelConfig, tokens: int) -> int:
    """Keys and values of one sequence of `tokens` in the rollout's cache (a sliding layer keeps its window)."""
    item = BYTES[m.dtype]
    total = 0
    for layer in family_of(m).layers(m):
        if not layer.has_kv:
            continue
        length = min(tokens, layer.cache_window) if layer.cache_window else tokens
        total += 2 * length * layer.kv_heads * layer.head_dim * item
    return total
