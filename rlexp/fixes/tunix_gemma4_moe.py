"""Fix: Tunix 0.1.7's Gemma 4 MoE block (26B-A4B) routes tokens from the wrong vector, and approximately.

Hugging Face's Gemma4TextDecoderLayer (the checkpoints' reference) routes each token from its residual stream,
RMS-normalised without a scale, while the experts read the residual through `pre_feedforward_layernorm_2`.
Tunix's `DecoderLayer.block` hands the MoE layer that normed expert input and routes from it, so whenever the
norm's scale is not uniform other experts are chosen and weighted (max logit error 0.70 of the logit scale on
a tiny random checkpoint; 4.6e-06 with that scale set to ones). Tunix also picks experts with
`lax.approx_max_k`, which on TPU may miss one of the top k. The replacement block routes from the residual with
an exact top-k, then runs Tunix's own expert computation; blocks without MoE run Tunix's code unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from tunix.models.gemma4 import model as gemma4_lib
from tunix.models.gemma4 import moe as moe_lib

from rlexp.compat import patching

BLOCK = patching.Target(gemma4_lib.DecoderLayer, "block", "c424ae0763c7b5e6")
EXPERTS = patching.Target(moe_lib.MoERagged, "_run_ffw_and_routing", "92e495209d1ce44f")


def route(moe: Any, residual: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(weights over all experts, the k chosen) of each token, as Hugging Face's Gemma4TextRouter routes it."""
    x = residual.astype(jnp.float32)
    normed = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + 1e-6)
    scaled = normed * moe.features**-0.5 * moe.router_scale.value.astype(jnp.float32)
    logits = jnp.einsum("gsd,de->gse", scaled, moe.router_logits.value.astype(jnp.float32))
    probs = jax.nn.softmax(logits, axis=-1)
    top, choices = jax.lax.top_k(probs, moe.num_experts_per_datapoint)
    # Tunix's expert step takes every expert's probability over the chosen ones' sum (it gathers the k it needs)
    # and scales each choice's output by the expert's per_expert_scale itself
    return probs / jnp.sum(top, axis=-1, keepdims=True), choices


def _routed_from_residual(tunix_block: Callable[..., Any]) -> Callable[..., Any]:
    def block(self, x, segment_pos, cache, attn_mask, per_layer_input=None, kv_shared_cache=None):
        if not self.config.enable_moe:
            return tunix_block(self, x, segment_pos, cache, attn_mask, per_layer_input, kv_shared_cache)
        cache, attn, kv = self.attn(
            self.pre_attention_norm(x), segment_pos, cache, attn_mask, kv_shared_cache=kv_shared_cache
        )
        attn = self.post_attention_norm(attn) + x
        dense = self.dense_post_ffw_norm(self.mlp(self.pre_ffw_norm(attn)))
        weights, choices = route(self.moe, attn)
        experts = self.moe._run_ffw_and_routing(self.moe_pre_ffw_norm(attn), choices, weights.astype(attn.dtype))
        ffw = self.post_ffw_norm(dense + self.moe_post_ffw_norm(experts)) + attn
        if self.config.per_layer_input_dim > 0 and per_layer_input is not None:
            mapped = jax.nn.gelu(self.per_layer_input_gate(ffw)) * per_layer_input
            ffw += self.post_per_layer_input_norm(self.per_layer_projection(mapped))
        return cache, ffw * self.skip_scale.value, kv

    return block


def install() -> None:
    patching.check("tunix_gemma4_moe", [EXPERTS], patching.REINSTALL)  # called, not replaced
    patching.install("tunix_gemma4_moe", [(BLOCK, 50, _routed_from_residual)], patching.REINSTALL)
