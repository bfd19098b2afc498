"""The learner and loss each `trainer.algorithm` gets: Tunix's GRPO-family learners (with rlexp's DAPO parts when
dynamic sampling or overlong shaping is on) and its PPO learner. The one place the loss is chosen."""

from __future__ import annotations

from typing import Any

from rlexp.config.derived import tunix_kl_mode
from rlexp.config.schema import RlexpConfig, TrainerConfig


def algorithm_learner(cfg: RlexpConfig, cluster: Any, reward_fns: list, metric_fns: list, refill: Any) -> Any:
    from rlexp.train import dapo

    t = cfg.trainer
    if t.algorithm == "ppo":
        from rlexp.train.ppo import build_ppo_learner

        return build_ppo_learner(cluster, t, reward_fns, metric_fns)
    learner_cls, algo = algorithm_config(t)
    # DAPOLearner appends Tunix's character-count shaping to the list it is given (off here): a copy
    args = (cluster, algo, list(reward_fns))
    if t.dynamic_sampling.enabled or t.overlong.enabled:
        return dapo.learner_class(learner_cls)(*args, metric_fns=metric_fns, trainer=t, refill=refill)
    return learner_cls(*args, metric_fns=metric_fns)


def algorithm_config(t: TrainerConfig) -> tuple[type, Any]:
    """(Tunix learner class, its algorithm config) for a GRPO-family trainer.algorithm."""
    common = dict(num_generations=t.num_generations, num_iterations=t.num_iterations, epsilon=t.epsilon)
    kl = dict(kl_loss_mode=tunix_kl_mode(t))
    if t.algorithm == "dapo":
        from tunix.rl.grpo.dapo_learner import DAPOConfig, DAPOLearner

        # Tunix's own dynamic sampling is a TODO and its overlong shaping counts characters: rlexp.train.dapo
        # does both as the paper does, so Tunix's are off.
        algo = DAPOConfig(
            **common,
            epsilon_high=t.epsilon_high or t.epsilon,
            loss_agg_mode=t.loss_agg_mode,
            dynamic_sampling=False,
            overlong_buffer={"enable": False},
        )
        # DAPO has no KL term; Tunix 0.1.7 tests `beta != 0.0`, so its None would still run the reference model
        algo.beta = 0.0
        return DAPOLearner, algo
    if t.algorithm == "drgrpo":
        from tunix.rl.grpo.drgrpo_learner import DrGRPOConfig, DrGRPOLearner

        return DrGRPOLearner, DrGRPOConfig(**common, **kl, beta=t.beta, loss_agg_mode=t.loss_agg_mode)
    from tunix.rl.grpo.grpo_learner import GRPOConfig, GRPOLearner

    loss_algo = "gspo-token" if t.algorithm == "gspo" else "grpo"
    return GRPOLearner, GRPOConfig(**common, **kl, beta=t.beta, loss_algo=loss_algo, loss_agg_mode=t.loss_agg_mode)
