"""An RL algorithm as one registered value: its config node, how its learner is built, the models it needs, the
terms the estimates count, and its rules.

`AlgorithmSpec` is everything generic code asks about `trainer.algorithm`: the session builds the learner
(`build_learner`, given a `LearnerInputs`), loads a reference policy when `needs_reference` says so (or the
algorithm's own model in Tunix's reference role, `load_reference`: OPD's teacher) and a critic when
`needs_critic`; the estimates (rlexp.estimates) count `extra_forward_passes`, the `reference_model` and the critic;
the checks (rlexp.checks) run the generic rules of `rlexp.algorithms.registry.check_algorithm` and the spec's own
`check_keys` (single keys of the trainer group, before anything is read) and `check` (across groups; may read
files, as OPD's teacher). Pure Python: a spec imports JAX and Tunix only inside `build_learner`/`load_reference`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlexp.config.schema import ModelConfig, RlexpConfig, TrainerConfig


@dataclass(frozen=True)
class LearnerInputs:
    """What the session hands an algorithm's `build_learner`."""

    conf: RlexpConfig
    cluster: Any  # Tunix's RLCluster (rlexp.train.cluster)
    reward_fns: list
    metric_fns: list
    refill: Callable[[], dict] | None  # the next batch of further prompts (DAPO's dynamic sampling)
    metric_key: Callable[[str], str]  # the key under which Tunix re-emits an rlexp metric (rlexp.train.metrics)


def kl_reference(t: TrainerConfig) -> bool:
    """A frozen copy of the policy for the KL term: when beta > 0."""
    return bool(t.beta)


def no_keys(t: TrainerConfig) -> None:
    return None


def no_rules(cfg: RlexpConfig) -> None:
    return None


def no_model(cfg: RlexpConfig) -> ModelConfig | None:
    return None


def no_passes(t: TrainerConfig) -> float:
    return 0.0


def same_trainer(t: TrainerConfig) -> TrainerConfig:
    return t


def samples_once(t: TrainerConfig) -> bool:
    return True


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str  # trainer.algorithm
    build_learner: Callable[[LearnerInputs], Any]  # Tunix's learner, JAX/Tunix imported when called
    # the trainer node of its own keys (`trainer.<node>.*`, a dataclass of rlexp.config.schema); another algorithm
    # refuses any of them set away from its default
    node: str | None = None
    has_kl: bool = True  # trainer.beta is its KL coefficient (a number); False: no KL term (beta must stay null)
    needs_reference: Callable[[TrainerConfig], bool] = kl_reference  # a frozen copy of the policy
    # a model of its own in Tunix's reference role instead of that copy (OPD's teacher): its option, and its loader
    reference_model: Callable[[RlexpConfig], ModelConfig | None] = no_model
    load_reference: Callable[[RlexpConfig, Any], Any] | None = None  # (config, mesh) -> nnx model
    needs_critic: bool = False  # a value model on the policy's final hidden states (rlexp.families.critic)
    critic_trainer: Callable[[TrainerConfig], TrainerConfig] = same_trainer  # the critic optimizer's settings
    takes_episodes: bool = False  # its learner takes agent=tools' episode mask (rlexp.train.episodes)
    # its loss weights each token by Tunix's TrainExample.sampler_is_weights (the GRPO loss), so
    # trainer.correction.* applies (rlexp.algorithms.correction)
    corrects_rollout: bool = False
    # forward-pass equivalents of the policy a step spends on each token beyond rollout (1), reference (1 when
    # needed) and the update (3 x num_iterations): the estimates' FLOPs and roofline cost
    extra_forward_passes: Callable[[TrainerConfig], float] = no_passes
    # measured seconds per step, (model, slice) -> (seconds, where measured); None: GRPO's (rlexp.estimates.cost)
    measured_step_s: dict[tuple[str, str], tuple[float, str]] | None = None
    check_keys: Callable[[TrainerConfig], None] = no_keys  # rules of single trainer keys (`--cfg job` runs them)
    check: Callable[[RlexpConfig], None] = no_rules  # rules across groups; may read files
    # its pass generates once per batch, so a batch sampled ahead may be scored while the next one generates
    # (rlexp.train.off_policy, pipelined); False where it samples in rounds (DAPO's dynamic sampling)
    pipelines_scoring: Callable[[TrainerConfig], bool] = samples_once
