"""`trainer=gspo` (Zheng et al. 2025): GRPO with a sequence-level importance ratio (Tunix's "gspo-token" loss)."""

from __future__ import annotations

from typing import Any

from rlexp.algorithms import grpo
from rlexp.algorithms.grpo import check_groups, family_learner
from rlexp.algorithms.registry import AlgorithmSpec, LearnerInputs, register
from rlexp.config.schema import TrainerConfig


def algorithm_config(t: TrainerConfig) -> Any:
    return grpo.algorithm_config(t, loss_algo="gspo-token")


def build_learner(inputs: LearnerInputs) -> Any:
    from tunix.rl.grpo.grpo_learner import GRPOLearner

    return family_learner(inputs, GRPOLearner, algorithm_config(inputs.conf.trainer))


SPEC = register(AlgorithmSpec(name="gspo", build_learner=build_learner, takes_episodes=True, check_keys=check_groups))
