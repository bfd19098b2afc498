"""Rules of the keys one algorithm has and another has not: DAPO's missing KL term, its dynamic sampling and
overlong shaping, and the overlong buffer against the completion budget. Pure Python: no JAX."""

from __future__ import annotations

from rlexp.config.schema import TrainerConfig
from rlexp.errors import ConfigError

# The algorithms whose loss has no KL term to the reference policy.
NO_KL = ("dapo",)


def overlong_buffer(t: TrainerConfig) -> int:
    """L_cache in tokens: trainer.overlong.buffer_tokens, or the DAPO paper's share (4096 of 20480) of the budget."""
    if t.overlong.buffer_tokens is not None:
        return t.overlong.buffer_tokens
    return max(1, round(t.max_completion_tokens / 5))


def kl_beta(t: TrainerConfig) -> float:
    """The KL coefficient the loss uses: 0 for an algorithm without a KL term."""
    return 0.0 if t.beta is None else float(t.beta)


def check_algorithm_keys(t: TrainerConfig) -> None:
    if t.algorithm in NO_KL and t.beta is not None:
        raise ConfigError(
            "trainer.beta", t.beta, f"{t.algorithm} has no KL term; drop the key (or pick trainer=grpo for a KL)"
        )
    if t.algorithm not in NO_KL and t.beta is None:
        raise ConfigError("trainer.beta", None, f"{t.algorithm} needs a KL coefficient: use 0 for none, e.g. 0.04")
    if t.beta is not None and t.beta < 0:
        raise ConfigError("trainer.beta", t.beta, "must be >= 0")
    ds = t.dynamic_sampling
    if ds.max_rounds < 0:
        raise ConfigError("trainer.dynamic_sampling.max_rounds", ds.max_rounds, "use 0 (no refill) or more rounds")
    o = t.overlong
    if o.penalty < 0:
        raise ConfigError("trainer.overlong.penalty", o.penalty, "must be >= 0 (the shaping only subtracts)")
    if o.buffer_tokens is not None and not 0 < o.buffer_tokens <= t.max_completion_tokens:
        raise ConfigError(
            "trainer.overlong.buffer_tokens",
            o.buffer_tokens,
            f"use 1..trainer.max_completion_tokens={t.max_completion_tokens}, or null for a fifth of it",
        )
