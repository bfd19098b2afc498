"""`trainer=ppo`: Tunix's PPO learner configured from the trainer group, its critic's optimizer, its rules and terms.

The policy loss is PPO's clipped surrogate (trainer.epsilon), token-mean over the completion; the critic
(rlexp.families.critic) is trained on the GAE returns with its new values clipped to within
trainer.ppo.clip_range_value of the old ones. Tunix 0.1.7 puts a KL penalty (beta x per-token KL to the reference)
into the per-token rewards before GAE. Its keys live in `trainer.ppo.*`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlexp.algorithms.registry import AlgorithmSpec, LearnerInputs, register
from rlexp.config.derived import tunix_kl_mode
from rlexp.config.schema import TrainerConfig
from rlexp.errors import ConfigError

# Measured seconds per PPO step, (model, slice) -> (seconds, where measured): GRPO's do not apply (the critic trains)
STEP_TIME_S: dict[tuple[str, str], tuple[float, str]] = {
    ("tiny", "cpu"): (0.10, "rlexp trainer=ppo, 2-core CPU, median step (docs/algorithms.md)"),
}


def ppo_config(t: TrainerConfig) -> Any:
    from tunix.rl.ppo.ppo_learner import PPOConfig

    p = t.ppo
    return PPOConfig(
        num_iterations=t.num_iterations,
        gamma=p.gamma,
        gae_lambda=p.gae_lambda,
        beta=float(t.beta or 0.0),
        epsilon=t.epsilon,
        entropy_coef=p.entropy_coef or None,
        clip_range_value=p.clip_range_value,
        kl_method=tunix_kl_mode(t),
    )


def critic_trainer_config(t: TrainerConfig) -> TrainerConfig:
    """The trainer group with the critic's learning rate: the critic's optimizer has the actor's schedule."""
    lr = t.ppo.critic_learning_rate or t.learning_rate
    return dataclasses.replace(t, learning_rate=lr)


def build_learner(inputs: LearnerInputs) -> Any:
    from tunix.rl.ppo.ppo_learner import PPOLearner

    t = inputs.conf.trainer
    return PPOLearner(inputs.cluster, ppo_config(t), list(inputs.reward_fns), metric_fns=inputs.metric_fns)


def extra_forward_passes(t: TrainerConfig) -> float:
    """The old policy's log-probs and the critic's values (a forward each), and the critic's update per iteration."""
    return 2.0 + 3.0 * t.num_iterations


def check_keys(t: TrainerConfig) -> None:
    p = t.ppo
    if t.num_generations != 1:
        raise ConfigError(
            "trainer.num_generations", t.num_generations, "PPO samples one completion per prompt: use 1 (trainer=ppo)"
        )
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


SPEC = register(
    AlgorithmSpec(
        name="ppo",
        build_learner=build_learner,
        node="ppo",
        needs_critic=True,
        critic_trainer=critic_trainer_config,
        extra_forward_passes=extra_forward_passes,
        measured_step_s=STEP_TIME_S,
        check_keys=check_keys,
    )
)
