"""Tunix's GRPO-family learners with rlexp's algorithm logic plugged in where Tunix 0.1.7 has no public hook
(rows `learners` of rlexp.tunix.privates): the seam overrides or wraps `_compute_rewards` and
`_generate_and_compute_advantage` and hands rlexp's code plain values through `Step`.

- `hooked_learner_class(base)`: DAPO's overlong shaping (`Hooks.rewards`) and dynamic sampling
  (`Hooks.examples`), rlexp.algorithms.dapo;
- `route_rollouts(learner, ...)`: agent=tools' episodes and their loss mask, rlexp.train.episodes;
- `resume_data_per_rollout(learner, n)`: a resumed run's data fast-forward counted in rollouts (num_iterations);
- `gate_rewards(learner, gate)`: the reward functions called inside the off-policy queue's scoring turn
  (bounded staleness, rlexp.train.off_policy);
- `rewrite_examples(learner, rewrite)`: each rollout's TrainExample rewritten after Tunix built it (on-policy
  distillation's per-token advantages, rlexp.algorithms.opd; the rollout-trainer mismatch correction's weights,
  rlexp.algorithms.correction), with `Step.sampler_logprobs` and `Step.trainer_logprobs` to read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np


@dataclasses.dataclass(frozen=True)
class Step:
    """What rlexp's learner logic sees of one rollout call: whether it trains, and the learner's public parts."""

    learner: Any
    mode: Any

    @property
    def training(self) -> bool:
        from tunix.rl.rl_cluster import Mode

        return self.mode == Mode.TRAIN

    @property
    def num_generations(self) -> int:
        return self.learner.algo_config.num_generations

    def completion_lengths(self) -> list[int]:
        """Token counts of this thread's last rollout (RecordingCluster, rlexp.tunix.sampler)."""
        return self.learner.rl_cluster.completion_lengths()

    def buffer(self, metrics: dict[str, tuple[float, Callable]]) -> None:
        """Log metrics (name -> (value, aggregate)) at this step, with the rollout's own."""
        self.learner.rl_cluster.buffer_metrics(metrics, mode=self.mode)

    def sampler_logprobs(self) -> list | None:
        """The rollout engine's log-probabilities of this thread's last rollout's tokens, one row per completion
        (RecordingCluster, rlexp.tunix.sampler); None when the engine returned none."""
        return self.learner.rl_cluster.rollout_logprobs()

    def trainer_logprobs(self, prompt_ids: Any, completion_ids: Any, micro_batch: int | None = None) -> Any:
        """Per-token log-probabilities [B, T] of `completion_ids` under the trainer's own model (its weights and
        dtype, on the actor's mesh, at the rollout's temperature): pi_old as the loss sees it, which the rollout
        model's copy (Tunix's `get_old_per_token_logps`) need not be."""
        import jax.numpy as jnp
        from flax import nnx
        from tunix.rl import common
        from tunix.rl.rl_cluster import Role

        cluster = self.learner.rl_cluster
        graphdef, state = nnx.split(cluster.actor_trainer.model)
        temperature = cluster.get_rollout_config(self.mode).temperature
        n = int(prompt_ids.shape[0])
        size = micro_batch or n
        with cluster.cluster_config.role_to_mesh[Role.ACTOR]:
            parts = [
                common.compute_per_token_logps(
                    graphdef,
                    state,
                    prompt_tokens=prompt_ids[i : i + size],
                    completion_tokens=completion_ids[i : i + size],
                    pad_id=cluster.rollout.pad_id(),
                    eos_id=cluster.rollout.eos_id(),
                    stop_gradient=True,
                    return_logits=False,
                    temperature=temperature,
                )
                for i in range(0, n, size)
            ]
        return jnp.concatenate(parts, axis=0)


class Hooks(Protocol):
    def rewards(self, rewards: np.ndarray, step: Step) -> np.ndarray: ...

    def examples(self, training_input: dict, sample: Callable[[dict], Any], step: Step) -> Any: ...


def hooked_learner_class(base: type) -> type:
    """`base` (a Tunix GRPO-family learner) whose rewards and rollout-to-example pass go through `hooks`
    (a keyword of the constructor): `hooks.rewards(rewards, step)` returns the rewards the advantages use;
    `hooks.examples(training_input, sample, step)` returns the TrainExample, calling `sample(input)` (Tunix's own
    pass) as many times as it needs."""

    class Hooked(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, hooks: Hooks, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.rlexp_hooks = hooks
            self.rlexp_rewrites: list[Callable[[Any, Step], Any]] = []  # rewrite_examples, per rollout

        def _compute_rewards(self, prompts: list, completions: list, mode: Any, *args: Any, **kwargs: Any) -> Any:
            rewards = np.asarray(super()._compute_rewards(prompts, completions, mode, *args, **kwargs), np.float64)
            return self.rlexp_hooks.rewards(rewards, Step(self, mode))

        def _generate_and_compute_advantage(self, training_input: dict, mode: Any = None) -> Any:
            from tunix.rl.rl_cluster import Mode

            mode = Mode.TRAIN if mode is None else mode
            own = super()._generate_and_compute_advantage
            step = Step(self, mode)

            def sample(x: dict) -> Any:
                example = own(x, mode)
                for rewrite in self.rlexp_rewrites:  # each rollout as it is sampled: its own log-probabilities
                    example = rewrite(example, step)
                return example

            return self.rlexp_hooks.examples(training_input, sample, step)

    Hooked.__name__ = Hooked.__qualname__ = f"Hooked{base.__name__}"
    return Hooked


def _rows_of(batch: dict[str, Any] | None, prompts: list[str]) -> list[dict[str, Any]] | None:
    """Each prompt's fields of the training input being rolled out (Tunix repeats every field per generation, so
    they line up with the prompts); None where they do not."""
    if not batch or len(batch.get("prompts", ())) != len(prompts):
        return None
    if any(str(a) != str(b) for a, b in zip(batch["prompts"], prompts, strict=True)):
        return None
    keys = [k for k, v in batch.items() if k != "prompts" and isinstance(v, list | tuple | np.ndarray)]
    keys = [k for k in keys if len(batch[k]) == len(prompts)]
    return [{k: batch[k][i] for k in keys} for i in range(len(prompts))]


def route_rollouts(
    learner: Any,
    run: Callable[..., Any],
    mask: Callable[[np.ndarray, Step], np.ndarray],
) -> None:
    """Make `learner`'s rollouts go through `run(prompts, turn, rollout_config, rows)` (an object with `final`
    texts, `tokens` and `prompt_tokens`; `turn(strings, config)` samples once with the cluster's own generate,
    under `config`'s widths, stop tokens and seed; `rows`: each prompt's fields of the training input, or None)
    and train under `mask(completion_mask, step)`.

    The learner's `_generate_and_compute_advantage` (guarded by its fingerprint) asks the cluster for
    completions and builds a pad-only mask: during that call the cluster's `generate` runs `run`, and the
    returned example's mask becomes `mask`'s. Nothing of Tunix's is replaced.
    """
    from tunix.rl import rl_cluster as rl
    from tunix.rl.rollout.base_rollout import RolloutOutput

    cluster = learner.rl_cluster
    own = learner._generate_and_compute_advantage
    own_generate = cluster.generate
    fields = ("max_prompt_length", "max_tokens_to_generate", "eos_tokens", "seed")  # what a turn's config sets
    batch: dict[str, Any] = {"input": None}  # the training input being rolled out

    def generate(prompts: list[str], mode: Any = rl.Mode.TRAIN, micro_batch_size: Any = None, **kw: Any) -> Any:
        base = cluster.cluster_config.rollout_config

        def turn(strings: list[str], config: Any) -> Any:
            # the cluster's generate samples with its own rollout config (its mesh and perf spans around the
            # call): this turn's widths, stop tokens and seed are set on it for the call
            saved = {f: getattr(base, f) for f in fields}
            for f in fields:
                setattr(base, f, getattr(config, f))
            try:
                return own_generate(prompts=strings, mode=mode, micro_batch_size=micro_batch_size, **kw)
            finally:
                for f, v in saved.items():
                    setattr(base, f, v)

        ep = run(list(prompts), turn, dataclasses.replace(base), _rows_of(batch.get("input"), list(prompts)))
        return RolloutOutput(text=ep.final, logits=None, tokens=ep.tokens, left_padded_prompt_tokens=ep.prompt_tokens,
                             logprobs=None)  # fmt: skip

    def generate_and_advantage(training_input: Any, mode: Any = rl.Mode.TRAIN) -> Any:
        import jax.numpy as jnp

        cluster.generate = generate
        batch["input"] = training_input  # its fields reach `run` with the prompts (env=openenv: the tasks)
        try:
            example = own(training_input, mode)
        finally:
            del cluster.generate  # the instance attribute: the class's method again
            batch["input"] = None
        new = mask(np.asarray(example.completion_mask), Step(learner, mode))
        return dataclasses.replace(example, completion_mask=jnp.asarray(new))

    learner._generate_and_compute_advantage = generate_and_advantage


def gate_rewards(learner: Any, gate: Callable[[], Any]) -> None:
    """Run the learner's reward functions (its `_compute_rewards`, the overrides above included) inside `gate()`:
    the off-policy queue's scoring turn (rlexp.train.off_policy, pipelined), so that reward functions keep being
    called one batch at a time while the next batch generates."""
    own = learner._compute_rewards

    def compute_rewards(*args: Any, **kwargs: Any) -> Any:
        with gate():
            return own(*args, **kwargs)

    learner._compute_rewards = compute_rewards


def rewrite_examples(learner: Any, rewrite: Callable[[Any, Step], Any]) -> None:
    """Make `learner` train on `rewrite(example, step)` of each TrainExample its `_generate_and_compute_advantage`
    (guarded by its fingerprint) builds: Tunix's rollout, masks and log-probabilities, with what `rewrite` changes
    (e.g. `example.replace(advantages=...)`). Wrapped on this instance; the class is untouched. A hooked learner
    (DAPO's dynamic sampling samples several rollouts per example) rewrites each rollout's example as it is
    sampled, so `rewrite` reads that rollout's log-probabilities; rewrites apply in the order given. A learner whose
    batches are sampled ahead (bounded staleness, rlexp.tunix.ahead) rewrites each when its step trains on it."""
    from tunix.rl import rl_cluster as rl

    rewrites = getattr(learner, "rlexp_rewrites", None)
    # a learner whose batches are sampled ahead (rlexp.tunix.ahead) rewrites each batch when it is handed over
    if rewrites is not None and getattr(learner, "rlexp_ahead", None) is None:
        rewrites.append(rewrite)
        return
    own = learner._generate_and_compute_advantage

    def generate_and_advantage(training_input: Any, mode: Any = rl.Mode.TRAIN) -> Any:
        return rewrite(own(training_input, mode), Step(learner, mode))

    learner._generate_and_compute_advantage = generate_and_advantage


def resume_data_per_rollout(learner: Any, num_iterations: int) -> None:
    """Tunix 0.1.7 fast-forwards a resumed run's data by the actor's update count, which counts each batch once per
    iteration: with num_iterations > 1 it skipped batches never trained on. Counted in batches here."""
    learner._last_iter_step //= num_iterations
