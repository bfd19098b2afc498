"""`trainer=dapo` (Yu et al. 2025): clip-higher, a token-level loss, no KL term, and its dynamic sampling and overlong
shaping as the paper has them, on Tunix's GRPO-family learners. Its keys live in `trainer.dapo.*`.

Tunix 0.1.7's `DAPOConfig(dynamic_sampling=True)` is a TODO (no group is filtered), and its overlong shaping
measures `len(completion)` in characters against 20480 with a 4096 buffer. Here both follow Yu et al. 2025:
- dynamic sampling (eq. 11): groups whose rewards are all equal have zero advantage and teach nothing; they are
  dropped and the batch is refilled with groups sampled from further prompts (a batch of the same shape each
  round, so nothing recompiles), at most `trainer.dynamic_sampling.max_rounds` rounds; a batch still short after
  them keeps dropped groups in the free places (zero advantage: no gradient) and the metrics say how many;
- overlong shaping (eq. 13) counts the completion's tokens, as the rollout produced them.

Sections: the paper's parts (pure functions), the spec (config, rules, learner), and `learner_class`: the paper's
parts as hooks that the Tunix seam (rlexp.tunix.learners) calls from inside Tunix's learner.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from rlexp.algorithms.grpo import check_groups, common_args, family_learner
from rlexp.algorithms.registry import AlgorithmSpec, LearnerInputs, register
from rlexp.config.schema import TrainerConfig
from rlexp.errors import ConfigError
from rlexp.tunix.learners import Step


# -- the paper's parts -------------------------------------------------------------------------------------------
def overlong_buffer(t: TrainerConfig) -> int:
    """L_cache in tokens: trainer.dapo.overlong.buffer_tokens, or the paper's share (4096 of 20480) of the budget."""
    o = t.dapo.overlong
    if o.buffer_tokens is not None:
        return o.buffer_tokens
    return max(1, round(t.max_completion_tokens / 5))


def overlong_penalty(lengths: Any, max_tokens: int, buffer_tokens: int, penalty: float = 1.0) -> np.ndarray:
    """The paper's R_length per completion: 0 up to L_max - L_cache tokens, ((L_max - L_cache) - |y|) / L_cache
    times `penalty` inside the buffer, -penalty beyond L_max."""
    lengths = np.asarray(lengths, dtype=np.float64)
    expected = max_tokens - buffer_tokens
    return np.clip((expected - lengths) / buffer_tokens, -1.0, 0.0) * penalty


def varied_groups(rewards: Any, num_generations: int) -> np.ndarray:
    """One bool per prompt group: whether its completions' rewards differ (the groups DAPO keeps)."""
    groups = np.asarray(rewards, dtype=np.float64).reshape(-1, num_generations)
    return np.ptp(groups, axis=1) > 1e-8


def choose_groups(kept: list[np.ndarray], needed: int) -> tuple[list[tuple[int, int]], int]:
    """(round, group) pairs filling `needed` places: varied groups first in the order sampled, then dropped
    groups of the first round when too few varied; and how many places the dropped ones fill."""
    chosen = [(r, int(g)) for r, mask in enumerate(kept) for g in np.flatnonzero(mask)][:needed]
    short = needed - len(chosen)
    if short:
        chosen += [(0, int(g)) for g in np.flatnonzero(~kept[0])[:short]]
    return chosen, short


def gather_groups(examples: list[Any], chosen: list[tuple[int, int]], num_generations: int) -> Any:
    """One TrainExample of the chosen (round, group) pairs, each group's rows in order."""
    import jax
    import jax.numpy as jnp

    offsets = np.cumsum([0] + [int(e.completion_ids.shape[0]) for e in examples])
    rows = np.concatenate([offsets[r] + g * num_generations + np.arange(num_generations) for r, g in chosen])
    return jax.tree.map(lambda *xs: jnp.concatenate([jnp.asarray(x) for x in xs])[rows], *examples)


# -- the spec ------------------------------------------------------------------------------------------------------
def algorithm_config(t: TrainerConfig) -> Any:
    """Tunix's DAPOConfig: clip-higher, the token-level loss; Tunix's own dynamic sampling (a TODO in 0.1.7) and
    character-count overlong shaping off, as `learner_class` does both as the paper does."""
    from tunix.rl.grpo.dapo_learner import DAPOConfig

    algo = DAPOConfig(
        **common_args(t),
        epsilon_high=t.dapo.epsilon_high or t.epsilon,
        loss_agg_mode=t.loss_agg_mode,
        dynamic_sampling=False,
        overlong_buffer={"enable": False},
    )
    # DAPO has no KL term; Tunix 0.1.7 tests `beta != 0.0`, so its None would still run the reference model
    algo.beta = 0.0
    return algo


def build_learner(inputs: LearnerInputs) -> Any:
    from tunix.rl.grpo.dapo_learner import DAPOLearner

    t = inputs.conf.trainer
    if not (t.dapo.dynamic_sampling.enabled or t.dapo.overlong.enabled):
        return family_learner(inputs, DAPOLearner, algorithm_config(t))
    cls = learner_class(DAPOLearner)
    return cls(
        inputs.cluster,
        algorithm_config(t),
        list(inputs.reward_fns),  # DAPOLearner appends Tunix's character-count shaping to the list (off here)
        metric_fns=inputs.metric_fns,
        trainer=t,
        refill=inputs.refill,
        metric_key=inputs.metric_key,
    )


def check_keys(t: TrainerConfig) -> None:
    check_groups(t)
    d = t.dapo
    if d.epsilon_high is not None and d.epsilon_high < t.epsilon:
        raise ConfigError("trainer.dapo.epsilon_high", d.epsilon_high, f"must be >= trainer.epsilon={t.epsilon}")
    if d.dynamic_sampling.max_rounds < 0:
        raise ConfigError(
            "trainer.dapo.dynamic_sampling.max_rounds",
            d.dynamic_sampling.max_rounds,
            "use 0 (no refill) or more rounds",
        )
    o = d.overlong
    if o.penalty < 0:
        raise ConfigError("trainer.dapo.overlong.penalty", o.penalty, "must be >= 0 (the shaping only subtracts)")
    if o.buffer_tokens is not None and not 0 < o.buffer_tokens <= t.max_completion_tokens:
        raise ConfigError(
            "trainer.dapo.overlong.buffer_tokens",
            o.buffer_tokens,
            f"use 1..trainer.max_completion_tokens={t.max_completion_tokens}, or null for a fifth of it",
        )


SPEC = register(
    AlgorithmSpec(
        name="dapo",
        build_learner=build_learner,
        node="dapo",
        has_kl=False,
        check_keys=check_keys,
        corrects_rollout=True,
        # dynamic sampling generates again for each round of its pass
        pipelines_scoring=lambda t: not t.dapo.dynamic_sampling.enabled,
    )
)


# -- the learner: the paper's parts as hooks of the Tunix seam -------------------------------------------------
# The seam (rlexp.tunix.learners, fingerprinted in rlexp.tunix.privates) overrides `_compute_rewards` and
# `_generate_and_compute_advantage` of Tunix 0.1.7's GRPO-family learners and calls these hooks with plain values.


def learner_class(base: type) -> Callable[..., Any]:
    """`base` (a Tunix GRPO-family learner) with the paper's dynamic sampling and overlong shaping; built with
    `trainer=`, `refill=` and `metric_key=` keywords. The overrides of Tunix are the seam's (rlexp.tunix.learners)."""
    from rlexp.tunix.learners import hooked_learner_class

    hooked = hooked_learner_class(base)

    def make(
        *args: Any, trainer: TrainerConfig, refill: Callable[[], dict], metric_key: Callable[[str], str], **kwargs: Any
    ) -> Any:
        return hooked(*args, hooks=PaperDapo(trainer, refill, metric_key), **kwargs)

    make.__name__ = make.__qualname__ = f"Paper{base.__name__}"
    return make


class PaperDapo:
    """The paper's overlong shaping (`rewards`) and dynamic sampling (`examples`), as the seam's learner hooks."""

    def __init__(self, trainer: TrainerConfig, refill: Callable[[], dict], metric_key: Callable[[str], str]) -> None:
        self.trainer, self.refill, self.metric_key = trainer, refill, metric_key
        self.local = threading.local()  # rollouts run in Tunix's data thread, evals in the training one

    # -- overlong shaping: tokens of each completion, recorded by the cluster's generate --------------
    def rewards(self, rewards: np.ndarray, step: Step) -> np.ndarray:
        o, t = self.trainer.dapo.overlong, self.trainer
        if o.enabled:
            shaped = overlong_penalty(step.completion_lengths(), t.max_completion_tokens, overlong_buffer(t), o.penalty)
            rewards = rewards + shaped
            self._buffer(step, {"rewards/overlong/mean": float(shaped.mean())}, np.mean)
        self.local.rewards = rewards
        return rewards

    # -- dynamic sampling ------------------------------------------------------------------------
    def examples(self, training_input: dict, sample: Callable[[dict], Any], step: Step) -> Any:
        first = sample(training_input)
        ds = self.trainer.dapo.dynamic_sampling
        if not step.training or not ds.enabled:
            return first
        g = step.num_generations
        examples, kept = [first], [varied_groups(self.local.rewards, g)]
        needed = len(kept[0])
        while sum(int(k.sum()) for k in kept) < needed and len(kept) <= ds.max_rounds:
            more = self.refill_input(len(training_input["prompts"]) // g, g, round_=len(kept))
            examples.append(sample(more))
            kept.append(varied_groups(self.local.rewards, g))
        chosen, short = choose_groups(kept, needed)
        self._buffer(
            step,
            {
                "dynamic_sampling/dropped_groups": float(sum(int((~k).sum()) for k in kept)),
                "dynamic_sampling/resampled_groups": float(needed * (len(kept) - 1)),
                "dynamic_sampling/rounds": float(len(kept) - 1),
                "dynamic_sampling/short_groups": float(short),
            },
            np.sum,
        )
        if len(examples) == 1 and not short:
            return first
        return gather_groups(examples, chosen, g)

    def refill_input(self, groups: int, g: int, round_: int) -> dict:
        """`groups` further prompts from the refill stream, each repeated per generation as Tunix does."""
        rows: dict[str, list] = {}
        while not rows or len(rows["prompts"]) < groups:
            batch = self.refill()
            for k, v in batch.items():
                rows.setdefault(k, []).extend(list(v))
        out = {k: np.repeat(np.asarray(v[:groups]), g, axis=0) for k, v in rows.items()}
        out["trajectory_ids"] = [f"refill{round_}_{i // g}_{i % g}" for i in range(groups * g)]
        return out

    def _buffer(self, step: Step, values: dict[str, float], agg: Callable) -> None:
        step.buffer({self.metric_key(k): (v, agg) for k, v in values.items()})
