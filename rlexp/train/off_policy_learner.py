"""The off-policy queue (rlexp.train.off_policy) attached to a learner built with batches sampled ahead
(rlexp.tunix.ahead): the queue's `Sampler` over the learner, the hand-over, the weights pushed after each update,
the gates of a pipelined pass, and the queue file each checkpoint stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from rlexp.errors import RunError
from rlexp.train.off_policy import OffPolicyQueue, Sampler


def pipelined(conf: Any) -> bool:
    """Whether, concurrent, one batch's reward functions run while the next batch generates (two threads): where the
    algorithm's pass generates once per batch (AlgorithmSpec.pipelines_scoring)."""
    from rlexp.algorithms.off_policy import concurrent
    from rlexp.algorithms.registry import algorithm_of

    return concurrent(conf) and algorithm_of(conf.trainer).pipelines_scoring(conf.trainer)


class LearnerSampler(Sampler):
    """The queue's view of a learner (rlexp.tunix.ahead.Ahead): each step's rows in the run's data order, sampled
    under that step's rollout seed."""

    def __init__(self, ahead: Any, rows: Callable[[int], Iterator[dict]], seed: Callable[[int], int]) -> None:
        self.ahead, self.rows, self.seed_of = ahead, rows, seed
        self._it: Iterator[dict] | None = None
        self._next = -1

    def prepare(self, step: int) -> Any:
        if self._it is None or step != self._next:
            self._it = self.rows(step)  # the data order from `step` on
        self._next = step + 1
        data = next(self._it, None)
        if data is None:
            raise RunError(f"step {step}: the train split has no batch left for it; lower trainer.max_steps")
        return data

    def seed(self, step: int) -> None:
        self.ahead.set_seed(self.seed_of(step))

    def sample_prepared(self, step: int, prepared: Any) -> Any:
        return self.ahead.sample(prepared, step)

    def sample(self, step: int) -> Any:
        data = self.prepare(step)
        self.seed(step)
        return self.ahead.sample(data, step)

    def install(self, staged: Any) -> None:
        self.ahead.install(staged)

    def stage(self) -> Any:
        return self.ahead.stage()


def attach(
    learner: Any,
    conf: Any,
    *,
    rows: Callable[[int], Iterator[dict]],
    seed: Callable[[int], int],
    start_step: int,
    run_dir: str | None,
    on_metrics: Callable[[int, dict[str, float]], None],
    write_samples: Callable[[list[str]], None],
) -> OffPolicyQueue:
    """The queue of a learner built with batches sampled ahead (rlexp.train.cluster.build_learner): `rows(step)` is
    the run's data order from `step` on, `seed(step)` that step's rollout seed; a resumed run's queue is read from
    its checkpoint; checkpoints store theirs (`run_dir`: the primary process's, None elsewhere)."""
    from rlexp.algorithms.off_policy import concurrent, staleness
    from rlexp.tunix.ahead import to_device, to_host
    from rlexp.tunix.learners import gate_rewards

    t = conf.trainer
    ahead = learner.rlexp_ahead
    queue = OffPolicyQueue(
        staleness(t),
        LearnerSampler(ahead, rows, seed),
        start_step=start_step,
        last_step=t.max_steps,
        concurrent=concurrent(conf),
        on_metrics=on_metrics,
        write_samples=write_samples,
        run_dir=run_dir,
        pipelined=pipelined(conf),
    )
    if queue.pipelined:  # one batch's reward functions run while the next batch generates
        learner.rl_cluster.gate = queue.generation
        gate_rewards(learner, queue.scored)
    if start_step:
        queue.restore(start_step, to_device)
    ahead.take = queue.take
    if queue.concurrent:
        ahead.stage_updates(queue.push)
    queue.save_hook(learner.rl_cluster.actor_trainer.checkpoint_manager, t.checkpoint_every, to_host)
    return queue
