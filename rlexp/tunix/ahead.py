"""A GRPO-family learner's training rollouts sampled ahead of the updates that train on them (bounded staleness,
`trainer.off_policy.max_staleness`; the queue, its thread and its checkpoints are rlexp.train.off_policy).

Tunix 0.1.7's learner samples each step's batch inside that step (`_prepare_data` calls the learner's
`_generate_and_compute_advantage`), so a rollout cannot start before its step. `Ahead` splits the two:
- `sample(rows, step)` runs the learner's own rollout-to-example pass on a step's batch whenever the queue asks:
  the input built as Tunix's `_prepare_data` builds it (each prompt repeated G times, its trajectory ids:
  `_compute_trajectory_ids`, row `learners` of rlexp.tunix.privates), what it buffers (rewards, lengths,
  rlexp's metric_fn) set aside, and the rollout's token counts and log-probabilities kept with the example;
- `hand_over(take)`: when Tunix's step asks for its batch, the learner's `_generate_and_compute_advantage`
  (wrapped on the instance, guarded by its fingerprint) returns the batch `take` gives (the slice Tunix asks, when
  micro-batches split a step), after buffering its metrics at that step and making its rollout record the
  thread's own, so that rewrites installed after this one (the mismatch correction) weigh it as they would a
  rollout sampled there and then, against the weights that train on it;
- weights (rollout devices of their own): `stage_updates(push)` turns the cluster's per-step weight sync into a
  staged copy handed to `push` (the copy on the rollout devices), and `install` puts a staged copy into the rollout
  engine when the queue's thread is between two batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np


@dataclasses.dataclass
class Sampled:
    """One step's batch as sampled: the TrainExample, the prompts it holds (each repeated G times), the rollout's
    record (token counts, log-probabilities) and the metrics it buffered, (metrics, mode) per call."""

    example: Any
    prompts: list[str]
    record: tuple[Any, Any]
    metrics: list[tuple[dict, Any]]


class Ahead:
    """The learner's rollouts, sampled when asked and handed over when its steps ask (see the module)."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner
        self.cluster = learner.rl_cluster
        self.own = learner._generate_and_compute_advantage  # the learner's own pass (and the rewrites before this)
        # the queue's hand-over (rlexp.train.off_policy), set once the session built it
        self.take: Callable[[list[str]], tuple[Any, int]] | None = None

    # -- sampling ------------------------------------------------------------------------------
    def inputs(self, rows: dict[str, Any], step: int) -> dict[str, Any]:
        """The learner's input for the batch `rows` of 1-based `step`: what Tunix's `_prepare_data` hands the pass,
        merged over the step's micro-batches (their trajectory ids continue one another)."""
        from tunix.rl import utils as rl_utils

        g = self.learner.algo_config.num_generations
        example = {k: np.repeat(v, g, axis=0) for k, v in rows.items()}
        example["trajectory_ids"] = self.learner._compute_trajectory_ids(example, step - 1)
        return rl_utils.merge_micro_batches([example])

    def sample(self, rows: dict[str, Any], step: int) -> Sampled:
        """Run the learner's pass on the batch of `step` now, with its metrics set aside."""
        from tunix.rl.rl_cluster import Mode

        x = self.inputs(rows, step)
        prompts = [str(p) for p in x["prompts"]]
        captured: list[tuple[dict, Any]] = []
        self.cluster.capture_metrics(captured)
        try:
            example = self.own(x, Mode.TRAIN)
        finally:
            self.cluster.capture_metrics(None)
        return Sampled(example, prompts, self.cluster.rollout_record(), captured)

    # -- handing over --------------------------------------------------------------------------
    def hand_over(self) -> None:
        """Make the learner's training passes return `self.take(prompts)`'s batch (its `sampled`) from the row its
        offset says, instead of sampling; evals still sample (Tunix's own eval path). Rewrites installed after
        this one (rlexp.tunix.learners.rewrite_examples) run on the handed-over batch."""
        from tunix.rl import rl_cluster as rl
        from tunix.rl import utils as rl_utils

        def generate_and_advantage(training_input: Any, mode: Any = rl.Mode.TRAIN) -> Any:
            if mode != rl.Mode.TRAIN:
                return self.own(training_input, mode)
            prompts = [str(p) for p in training_input["prompts"]]
            assert self.take is not None, "the off-policy queue was not attached"
            queued, offset = self.take(prompts)
            batch: Sampled = queued.sampled
            if offset == 0:  # the step's first slice: its metrics, at the step that trains on it
                for metrics, buffered_mode in batch.metrics:
                    self.cluster.buffer_metrics(metrics, mode=buffered_mode)
            rows = slice(offset, offset + len(prompts))
            lengths, logprobs = batch.record
            self.cluster.restore_rollout_record(
                (None if lengths is None else lengths[rows], None if logprobs is None else logprobs[rows])
            )
            if offset == 0 and len(prompts) == len(batch.prompts):
                return batch.example
            return rl_utils.get_batch_slice(batch.example, rows)

        self.learner._generate_and_compute_advantage = generate_and_advantage
        self.learner.rlexp_ahead = self

    # -- weights (rollout devices of their own) ----------------------------------------------------
    def _filter(self) -> tuple[type, ...]:
        from flax import nnx
        from tunix.sft import utils as sft_utils

        return (nnx.LoRAParam if sft_utils.is_lora_enabled(self.cluster.actor_trainer.model) else nnx.Param,)

    def stage(self, params: Any = None) -> Any:
        """A copy of the trainer's weights (or `params`) on the rollout devices, in the rollout copy's layout."""
        from flax import nnx
        from tunix.rl import reshard

        types = self._filter()
        source = nnx.state(self.cluster.actor_trainer.model, types) if params is None else params
        return reshard.reshard_pytree(source, nnx.state(self.cluster.rollout.model(), types))

    def stage_updates(self, push: Callable[[int, Callable[[], Any]], None]) -> None:
        """Make the cluster's weight sync after each step (Tunix's `sync_weights`, through the rollout's public
        `update_params`) call `push(version, stage)` instead of writing into the engine the queue's thread
        samples with: `version` is the steps trained, `stage()` copies the weights to the rollout devices."""
        rollout = self.cluster.rollout
        self.update_params = rollout.update_params

        def staged_update(params: Any, filter_types: Any = None) -> None:
            push(self.cluster.global_steps + 1, lambda: self.stage(params))  # sync_weights counts the step after

        rollout.update_params = staged_update

    def install(self, staged: Any) -> None:
        """Put a staged copy into the rollout engine (its dtype cast as Tunix's sync casts it)."""
        self.update_params(staged, self._filter())

    def set_seed(self, seed: int) -> None:
        self.cluster.cluster_config.rollout_config.seed = seed


def to_host(example: Any) -> Any:
    """A TrainExample with its arrays copied to host numpy (a checkpoint's queued batches)."""
    import jax

    return jax.device_get(example)


def to_device(example: Any) -> Any:
    """A TrainExample read from a checkpoint, its arrays on the default device again."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(jnp.asarray, example)
