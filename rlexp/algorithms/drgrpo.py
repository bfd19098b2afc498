"""`trainer=drgrpo` (Liu et al. 2025, Dr. GRPO): advantage r - mean (no std), no length normalisation."""

from __future__ import annotations

from typing import Any

from rlexp.algorithms.grpo import check_groups, common_args, family_learner, kl_args
from rlexp.algorithms.registry import AlgorithmSpec, LearnerInputs, register
from rlexp.config.schema import TrainerConfig


def algorithm_config(t: TrainerConfig) -> Any:
    from tunix.rl.grpo.drgrpo_learner import DrGRPOConfig

    return DrGRPOConfig(**common_args(t), **kl_args(t), beta=t.beta, loss_agg_mode=t.loss_agg_mode)


def build_learner(inputs: LearnerInputs) -> Any:
    from tunix.rl.grpo.drgrpo_learner import DrGRPOLearner

    return family_learner(inputs, DrGRPOLearner, algorithm_config(inputs.conf.trainer))


SPEC = register(AlgorithmSpec(name="drgrpo", build_learner=build_learner, takes_episodes=True, check_keys=check_groups))
