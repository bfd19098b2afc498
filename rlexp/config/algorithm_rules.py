"""Rules of the keys one algorithm has and another has not: DAPO's missing KL term, its dynamic sampling and
overlong shaping, and the overlong buffer against the completion budget. Pure Python: no JAX."""

from __future__ import annotations

from rlexp.config.derived import tunix_kl_mode
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
    tunix_kl_mode(t)
    if t.algorithm == "ppo":
        _check_ppo(t)
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


def _check_ppo(t: TrainerConfig) -> None:
    p = t.ppo
    if t.num_generations != 1:
        raise ConfigError(
            "trainer.num_generations", t.num_generations, "PPO samples one completion per prompt: use 1 (trainer=ppo)"
        )
    for key in ("dynamic_sampling", "overlong"):
        if getattr(t, key).enabled:
            raise ConfigError(f"trainer.{key}.enabled", True, "DAPO's, on GRPO-family learners: false for PPO")
    if not (0 <= p.gamma <= 1 and 0 <= p.gae_lambda <= 1):
        key, value = (
            ("trainer.ppo.gamma", p.gamma) if not 0 <= p.gamma <= 1 else ("trainer.ppo.gae_lambda", p.gae_lambda)
        )
        raise ConfigError(key, value, "use a value in [0, 1]")
    if p.clip_range_value <= 0:
        raise ConfigError("trainer.ppo.clip_range_value", p.clip_range_value, "must be > 0, e.g. 0.2")
    if p.critic_learning_rate is not None and p.critic_learning_rate <= 0:
        raise ConfigError("trainer.ppo.critic_learning_rate", p.critic_learning_rate, "must be > 0 (or null)")
    if p.entropy_coef < 0:
        raise ConfigError("trainer.ppo.entropy_coef", p.entropy_coef, "must be >= 0")


def needs_critic(t: TrainerConfig) -> bool:
    """Whether the algorithm trains a critic on the policy's final hidden states (PPO): only families whose
    model hands them out can run it (`FamilySpec.critic`, checked by rlexp.families.rules)."""
    return t.algorithm == "ppo"
