"""DAPO's dynamic sampling and overlong shaping, as the paper has them, on Tunix's GRPO-family learners.

Tunix 0.1.7's `DAPOConfig(dynamic_sampling=True)` is a TODO (no group is filtered), and its overlong shaping
measures `len(completion)` in characters against 20480 with a 4096 buffer. Here both follow Yu et al. 2025:
- dynamic sampling (eq. 11): groups whose rewards are all equal have zero advantage and teach nothing; they are
  dropped and the batch is refilled with groups sampled from further prompts (a batch of the same shape each
  round, so nothing recompiles), at most `trainer.dynamic_sampling.max_rounds` rounds; a batch still short after
  them keeps dropped groups in the free places (zero advantage: no gradient) and the metrics say how many;
- overlong shaping (eq. 13) counts the completion's tokens, as the rollout produced them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from rlexp.config.algorithm_rules import overlong_buffer
from rlexp.config.schema import TrainerConfig
from rlexp.train.metrics import rlexp_metric_key
from rlexp.tunix.learners import Step


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


def learner_class(base: type) -> type:
    """`base` (a Tunix GRPO-family learner) with the paper's dynamic sampling and overlong shaping; built with
    `trainer=` and `refill=` keywords. The overrides of Tunix are the seam's (rlexp.tunix.learners)."""
    from rlexp.tunix.learners import hooked_learner_class

    hooked = hooked_learner_class(base)

    def make(*args: Any, trainer: TrainerConfig, refill: Callable[[], dict], **kwargs: Any) -> Any:
        return hooked(*args, hooks=PaperDapo(trainer, refill), **kwargs)

    make.__name__ = make.__qualname__ = f"Paper{base.__name__}"
    return make


class PaperDapo:
    """The paper's overlong shaping (`rewards`) and dynamic sampling (`examples`), as the seam's learner hooks."""

    def __init__(self, trainer: TrainerConfig, refill: Callable[[], dict]) -> None:
        self.trainer, self.refill = trainer, refill
        self.local = threading.local()  # rollouts run in Tunix's data thread, evals in the training one

    # -- overlong shaping: tokens of each completion, recorded by the cluster's generate --------------
    def rewards(self, rewards: np.ndarray, step: Step) -> np.ndarray:
        o, t = self.trainer.overlong, self.trainer
        if o.enabled:
            shaped = overlong_penalty(step.completion_lengths(), t.max_completion_tokens, overlong_buffer(t), o.penalty)
            rewards = rewards + shaped
            _buffer(step, {"rewards/overlong/mean": float(shaped.mean())}, np.mean)
        self.local.rewards = rewards
        return rewards

    # -- dynamic sampling ------------------------------------------------------------------------
    def examples(self, training_input: dict, sample: Callable[[dict], Any], step: Step) -> Any:
        first = sample(training_input)
        if not step.training or not self.trainer.dynamic_sampling.enabled:
            return first
        g = step.num_generations
        examples, kept = [first], [varied_groups(self.local.rewards, g)]
        needed = len(kept[0])
        while sum(int(k.sum()) for k in kept) < needed and len(kept) <= self.trainer.dynamic_sampling.max_rounds:
            more = self.refill_input(len(training_input["prompts"]) // g, g, round_=len(kept))
            examples.append(sample(more))
            kept.append(varied_groups(self.local.rewards, g))
        chosen, short = choose_groups(kept, needed)
        _buffer(
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


def _buffer(step: Step, values: dict[str, float], agg: Callable) -> None:
    step.buffer({rlexp_metric_key(k): (v, agg) for k, v in values.items()})


def gather_groups(examples: list[Any], chosen: list[tuple[int, int]], num_generations: int) -> Any:
    """One TrainExample of the chosen (round, group) pairs, each group's rows in order."""
    import jax
    import jax.numpy as jnp

    offsets = np.cumsum([0] + [int(e.completion_ids.shape[0]) for e in examples])
    rows = np.concatenate([offsets[r] + g * num_generations + np.arange(num_generations) for r, g in chosen])
    return jax.tree.map(lambda *xs: jnp.concatenate([jnp.asarray(x) for x in xs])[rows], *examples)


def cycle_batches(make: Callable[[int], Iterator[dict]]) -> Callable[[], dict]:
    """A refill source: the next batch of `make(pass)`, starting a new pass when one ends."""
    state = {"pass": 0, "it": make(0)}

    def next_batch() -> dict:
        for _ in range(2):
            try:
                return next(state["it"])
            except StopIteration:
                state["pass"] += 1
                state["it"] = make(state["pass"])
        raise RuntimeError("the refill stream yields no batch")

    return next_batch
