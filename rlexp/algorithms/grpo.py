"""`trainer=grpo` (Shao et al. 2024): group-normalised advantages, the clipped ratio, a KL to the reference (beta).

Also the pieces its family (dapo, drgrpo, gspo, opd) shares: the group-size rule and Tunix's GRPO-family
learner built from a config.
"""

from __future__ import annotations

from typing import Any

from rlexp.algorithms.registry import AlgorithmSpec, LearnerInputs, register
from rlexp.config.derived import tunix_kl_mode
from rlexp.config.schema import TrainerConfig
from rlexp.errors import ConfigError


def check_groups(t: TrainerConfig) -> None:
    """A group-relative advantage needs at least two completions per prompt."""
    if t.num_generations < 2:
        raise ConfigError("trainer.num_generations", t.num_generations, "GRPO needs >= 2 completions per prompt")


def common_args(t: TrainerConfig) -> dict[str, Any]:
    """The keys every Tunix GRPO-family config takes from the trainer group."""
    return dict(num_generations=t.num_generations, num_iterations=t.num_iterations, epsilon=t.epsilon)


def kl_args(t: TrainerConfig) -> dict[str, Any]:
    """The KL estimator of a config with a KL term (trainer.kl_estimator, in Tunix's words)."""
    return dict(kl_loss_mode=tunix_kl_mode(t))


def family_learner(inputs: LearnerInputs, learner_cls: type, algo: Any) -> Any:
    """Tunix's `learner_cls` over the cluster; its reward list a copy (DAPOLearner appends to the one it gets)."""
    return learner_cls(inputs.cluster, algo, list(inputs.reward_fns), metric_fns=inputs.metric_fns)


def algorithm_config(t: TrainerConfig, loss_algo: str = "grpo") -> Any:
    """Tunix's GRPOConfig; `loss_algo` "gspo-token" gives GSPO's sequence-level ratio."""
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    return GRPOConfig(**common_args(t), **kl_args(t), beta=t.beta, loss_algo=loss_algo, loss_agg_mode=t.loss_agg_mode)


def build_learner(inputs: LearnerInputs) -> Any:
    from tunix.rl.grpo.grpo_learner import GRPOLearner

    return family_learner(inputs, GRPOLearner, algorithm_config(inputs.conf.trainer))


SPEC = register(AlgorithmSpec(name="grpo", build_learner=build_learner, takes_episodes=True, check_keys=check_groups))
