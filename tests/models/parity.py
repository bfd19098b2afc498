"""Run an rlexp-loaded model the way Tunix does (forward with a causal mask; greedy through Tunix's Sampler)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np


class IdTokenizer:
    """Text is space-separated token ids, so the Sampler sees exactly the reference's tokens."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def encode(self, text: str, **_: Any) -> list[int]:
        return [int(t) for t in text.split()]

    def decode(self, ids: Any, **_: Any) -> str:
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self) -> int:
        return 0  # falsy: the Sampler prepends nothing

    def eos_id(self) -> int:
        return self.vocab + 7  # never produced: generation runs the full length

    def pad_id(self) -> int:
        return self.vocab + 5  # never in a prompt or a completion (generated pads would be masked)


def rlexp_logits(model: Any, tokens: np.ndarray) -> np.ndarray:
    b, n = tokens.shape
    positions = jnp.tile(jnp.arange(n)[None], (b, 1))
    mask = jnp.tile(jnp.tril(jnp.ones((n, n), dtype=bool))[None], (b, 1, 1))
    from flax import nnx

    # one compiled call: op-by-op dispatch of a 6-layer model costs seconds on a shared CPU
    logits, _ = nnx.jit(lambda mdl, t, p, a: mdl(t, p, None, a))(model, jnp.asarray(tokens), positions, mask)
    return np.asarray(logits, dtype=np.float32)


def rlexp_greedy(model: Any, tokens: np.ndarray, steps: int, vocab: int) -> np.ndarray:
    from tunix.generate.sampler import CacheConfig, Sampler

    tok = IdTokenizer(vocab)
    cache = CacheConfig(cache_size=tokens.shape[1] + steps + 8, num_layers=0, num_kv_heads=0, head_dim=0)
    sampler = Sampler(model, tok, cache)
    out = sampler([tok.decode(row) for row in tokens], max_generation_steps=steps, temperature=0.0)
    return np.array([np.asarray(t) for t in out.tokens])


def max_rel_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| over the logit scale (max |ref|)."""
    return float(np.max(np.abs(ours - ref)) / max(np.max(np.abs(ref)), 1e-6))
