"""`trainer=ppo`: Tunix's PPO learner configured from the trainer group, and its critic's optimizer.

The policy loss is PPO's clipped surrogate (trainer.epsilon), token-mean over the completion; the critic is
trained on the GAE returns with its new values clipped to within trainer.ppo.clip_range_value of the old ones.
Tunix 0.1.7 puts a KL penalty (beta x per-token KL to the reference) into the per-token rewards before GAE.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlexp.config.derived import tunix_kl_mode
from rlexp.config.schema import TrainerConfig


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


def build_ppo_learner(cluster: Any, t: TrainerConfig, reward_fns: list, metric_fns: list) -> Any:
    from tunix.rl.ppo.ppo_learner import PPOLearner

    return PPOLearner(cluster, ppo_config(t), list(reward_fns), metric_fns=metric_fns)
