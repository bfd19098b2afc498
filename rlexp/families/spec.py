"""A model family as one registered value: how it is built, which checkpoints it reads, its size terms, its rules.

`FamilySpec` is everything generic code asks about a family: the builder and Tunix config (`build`,
`tunix_config`, importing JAX only when called), the Hugging Face `model_type`s it accepts and what config.json
keys its option must match (`hf_fields`, `moe_fields`, `moe_required`), the option a config.json describes
(`from_hf`), the weights and KV cache the estimates count (`layers`, `layer_params`, `extra_params`,
`inactive_params`, `lora_mlp`), the export's parameter names (`hf_names`), and its rules (`required_extra`,
`critic`, `experts_over_fsdp`, the hub's naming of base and tuned releases). The helpers below are the terms of a
plain decoder (Llama-style layers), which a family composes with its own. Pure Python: no JAX.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlexp.config.schema import ModelConfig

# (Hugging Face tensor name, array) pairs an nnx parameter becomes; [] for one the export drops
HfNames = list[tuple[str, Any]]


@dataclass(frozen=True)
class Layer:
    """One decoder layer as the estimates see it."""

    head_dim: int
    hidden: int  # the dense MLP's width
    kv_heads: int
    cache_window: int | None = None  # positions the rollout's KV cache keeps for it; None: every position
    has_kv: bool = True  # False: it reads an earlier layer's cache (KV sharing)
    k_eq_v: bool = False  # values are the keys: no value projection


def uniform_layers(m: ModelConfig) -> list[Layer]:
    """num_layers identical layers of the option's dimensions."""
    return [Layer(m.head_dim, m.hidden_dim, m.num_kv_heads) for _ in range(m.num_layers)]


def attention_params(m: ModelConfig, layer: Layer) -> int:
    """Query, key, value and output projections (no value projection when the values are the keys)."""
    d, n, h, k = m.embed_dim, m.num_heads, layer.head_dim, layer.kv_heads
    return d * n * h + (1 if layer.k_eq_v else 2) * d * k * h + n * h * d


def dense_mlp_params(m: ModelConfig, layer: Layer) -> int:
    """Gate, up and down projections of a SwiGLU MLP."""
    return 3 * m.embed_dim * layer.hidden


def routed_experts_params(m: ModelConfig, width: int) -> int:
    """A router and extra.num_experts SwiGLU experts of `width`."""
    e = int(m.extra["num_experts"])
    return m.embed_dim * e + e * 3 * m.embed_dim * width


def unrouted_experts_params(m: ModelConfig, width: int) -> int:
    """Weights of the experts a token is not routed to, over all layers."""
    e, k = int(m.extra["num_experts"]), int(m.extra["experts_per_token"])
    return m.num_layers * (e - k) * 3 * m.embed_dim * width


def dense_layer_params(m: ModelConfig, layer: Layer) -> int:
    """A Llama-style layer: attention, a SwiGLU MLP, two RMS norms."""
    return attention_params(m, layer) + dense_mlp_params(m, layer) + 2 * m.embed_dim


def no_params(m: ModelConfig) -> int:
    return 0


def dense_lora_mlp(m: ModelConfig) -> bool:
    """LoRA adapts the MLP's projections unless they are experts (which are not Linear layers)."""
    return not (m.extra or {}).get("num_experts")


Table = dict[str, tuple[str, Callable[[Any], Any]]]


def layer_table_names(m: ModelConfig, key: str, v: Any, prefix: str, table: Callable[[int], Table]) -> HfNames | None:
    """`layers.<i>.<rest>` through the family's table of rest -> (Hugging Face name, transform)."""
    match = re.fullmatch(r"layers\.(\d+)\.(.+)", key)
    if not match:
        return None
    i, rest = match.groups()
    rows = table(m.embed_dim)
    if rest not in rows:
        from rlexp.errors import RlexpError

        raise RlexpError(f"export of {m.family} does not know parameter {key}")
    name, fn = rows[rest]
    return [(f"{prefix}layers.{i}.{name}", fn(v))]


@dataclass(frozen=True)
class FamilySpec:
    name: str  # model.family
    hf_model_types: tuple[str, ...]  # config.json "model_type" values this family loads
    build: Callable[[ModelConfig, str, Any], Any]  # (option, checkpoint folder, mesh) -> nnx model with weights
    tunix_config: Callable[[ModelConfig], Any]  # the Tunix-style ModelConfig of an option
    from_hf: Callable[[ModelConfig, dict[str, Any], dict[str, Any]], None]  # (option, text config, config.json)
    required_extra: tuple[str, ...]
    # option field or extra key -> config.json key, compared when a checkpoint is loaded
    hf_fields: dict[str, str] = field(default_factory=dict)
    # replacing hf_fields entries for a mixture-of-experts option (one with extra.num_experts)
    moe_fields: dict[str, str] = field(default_factory=dict)
    # config.json values a mixture-of-experts checkpoint must have for this family's implementation
    moe_required: dict[str, object] = field(default_factory=dict)
    # memory and FLOPs terms (rlexp.estimates): the layers, each layer's weights, the rest beyond the embedding,
    # final norm and LM head, the weights a token does not pass through besides the input embedding
    layers: Callable[[ModelConfig], list[Layer]] = uniform_layers
    layer_params: Callable[[ModelConfig, Layer], int] = dense_layer_params
    extra_params: Callable[[ModelConfig], int] = no_params
    inactive_params: Callable[[ModelConfig], int] = no_params
    lora_mlp: Callable[[ModelConfig], bool] = dense_lora_mlp  # whether LoRA adapts the MLP projections
    # export: the Hugging Face names of an nnx parameter beyond the embedding, final norm and LM head
    hf_names: Callable[[ModelConfig, str, Any, str], HfNames | None] = lambda m, key, v, prefix: None
    export_drops: tuple[str, ...] = ()  # suffixes of the base checkpoint's tensors the export does not copy
    critic: bool = False  # Tunix's model hands out its final hidden states, which PPO's critic reads
    experts_over_fsdp: bool = False  # Tunix splits its experts over FSDP (the FSDP size must divide them)
    hub_prefixes: tuple[str, ...] = ()  # hub repository names of its releases start with one of these
    hub_plain_tuned: bool | None = None  # whether a release without -it/-Instruct/-Base is instruction-tuned
