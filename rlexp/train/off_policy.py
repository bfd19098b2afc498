"""Bounded staleness (`trainer.off_policy.max_staleness` = k > 0): a queue of batches sampled ahead of the updates
that train on them (rules: rlexp.algorithms.off_policy; the learner's side: rlexp.tunix.ahead).

The batch of step t is sampled with exactly the weights of step max(s, t - 1 - k) (s: the step a run resumed
from), so a run samples the same batches whatever the timing: it is reproducible and resumes to the same numbers.
Two ways to run it, one schedule:
- colocated (the trainer's devices sample): when step t asks for its batch, the batches up to t + k are sampled
  first, in the learner's data thread, with the weights of step t - 1; the queue decouples sampling from updating;
- concurrent (`slice.rollout_devices > 0`): a thread samples the batches in order while the trainer updates, each
  once its weights exist. After each update the trainer pushes its weights: a copy on the rollout devices, staged
  (one at most, `push` waits while the thread still needs the last one) and put into the engine by the thread
  between two batches, so the rollout stops only for that swap. Mid-run evals pause the thread and sample with the
  trainer's weights, then give the thread its own back.

Each batch records its policy version; each step logs `off_policy/staleness_mean` and `_max` (steps trained before
it minus the version: at most k), `perf/trainer_wait_sec` (the learner waiting for its batch: colocated, the
sampling itself) and `perf/rollout_wait_sec` (the thread waiting for the weights it must sample with).
A checkpoint of step s stores the batches of steps s+1..s+k beside it (`checkpoints/off_policy/<s>.pkl`, written
before orbax's save starts), so a resumed run trains on the batches the uninterrupted one trained on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlexp import storage
from rlexp.algorithms.off_policy import version_of
from rlexp.errors import RunError

log = logging.getLogger(__name__)

QUEUE_DIR = "checkpoints/off_policy"
STALENESS_MEAN, STALENESS_MAX = "off_policy/staleness_mean", "off_policy/staleness_max"
TRAINER_WAIT, ROLLOUT_WAIT = "perf/trainer_wait_sec", "perf/rollout_wait_sec"
ROLLOUT_TIME = "perf/rollout_time_sec"  # concurrent: the batch's own sampling (Tunix's spans see only its threads)


@dataclasses.dataclass
class Batch:
    """A step's batch sampled ahead: `sampled` (rlexp.tunix.ahead.Sampled: example, prompts, record, metrics), the
    policy version it was sampled with, its samples.jsonl rows and the time the sampling waited for its weights."""

    step: int
    version: int
    sampled: Any
    samples: list[str] = dataclasses.field(default_factory=list)
    rollout_wait: float = 0.0
    rollout_time: float = 0.0  # seconds its sampling took (the learner's whole pass: rollout, reference, rewards)

    @property
    def prompts(self) -> list[str]:
        return self.sampled.prompts


class Sampler:
    """What the queue asks of the learner (rlexp.tunix.ahead.Ahead, or a test's stand-in)."""

    def sample(self, step: int) -> Any:  # the Sampled batch of `step`, sampled now with the engine's weights
        raise NotImplementedError

    def install(self, staged: Any) -> None:  # put staged weights into the rollout engine
        raise NotImplementedError

    def stage(self) -> Any:  # a staged copy of the trainer's weights now
        raise NotImplementedError


def queue_path(run_dir: str, step: int) -> str:
    return storage.join(run_dir, QUEUE_DIR, f"{step}.pkl")


def check_resume(run_dir: str, step: int) -> str:
    """The queue file a run resuming from checkpoint `step` reads; RunError in one line when it is not there."""
    path = queue_path(run_dir, step)
    if not storage.exists(path):
        raise RunError(
            f"{path}: missing, so checkpoint {step} cannot resume trainer.off_policy.max_staleness > 0 (its queue of "
            "batches sampled ahead is gone); move checkpoints/actor/" + f"{step} aside to resume from an earlier one"
        )
    return path


class OffPolicyQueue:
    """The batches sampled ahead and the weights they are sampled with (see the module)."""

    def __init__(
        self,
        k: int,
        sampler: Sampler,
        *,
        start_step: int,
        last_step: int,
        concurrent: bool,
        on_metrics: Callable[[int, dict[str, float]], None],
        write_samples: Callable[[list[str]], None],
        run_dir: str | None = None,
    ) -> None:
        self.k, self.sampler, self.concurrent = k, sampler, concurrent
        self.resumed, self.last = start_step, last_step
        self.on_metrics, self.write_samples, self.run_dir = on_metrics, write_samples, run_dir
        self.queue: dict[int, Batch] = {}
        self.next = start_step + 1  # the next step to sample
        self.serving: Batch | None = None  # the step being trained: handed over, kept until the next one
        self.offset = 0  # rows of `serving` handed over so far (micro-batches ask for slices)
        self.cond = threading.Condition()
        self.engine = threading.Lock()  # held while the rollout engine samples or changes weights
        self.pending: tuple[int, Any] | None = None  # staged weights (version, copy) the thread has not taken
        self.installed: tuple[int, Any] | None = None  # what the engine samples with (concurrent)
        self.error: BaseException | None = None
        self.stopped = False
        self.thread: threading.Thread | None = None
        self._local = threading.local()  # the batch being sampled in this thread (its samples.jsonl rows)

    # -- sampling ------------------------------------------------------------------------------
    def sampling(self) -> Batch | None:
        """The batch this thread is sampling now, or None (its step, version and samples rows for metric_fn)."""
        return getattr(self._local, "batch", None)

    def _sample(self, step: int, version: int, waited: float = 0.0) -> Batch:
        batch = Batch(step, version, None, rollout_wait=waited)
        self._local.batch = batch
        began = time.perf_counter()
        try:
            batch.sampled = self.sampler.sample(step)
        finally:
            self._local.batch = None
        batch.rollout_time = time.perf_counter() - began
        return batch

    def start(self) -> None:
        """Concurrent: the trainer's weights now are the first version the thread samples with."""
        if self.concurrent and self.thread is None:
            self.installed = (self.resumed, self.sampler.stage())
            with self.engine:
                self.sampler.install(self.installed[1])
            self.thread = threading.Thread(target=self._run, name="rlexp-off-policy", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                with self.cond:
                    if self.stopped or self.next > self.last:
                        return
                    step, need = self.next, version_of(self.next, self.k, self.resumed)
                    began = time.perf_counter()
                    while (
                        not self.stopped
                        and self.installed[0] != need
                        and (self.pending is None or self.pending[0] != need)
                    ):
                        self.cond.wait()
                    if self.stopped:
                        return
                    waited = time.perf_counter() - began
                    take = self.pending if self.installed[0] != need else None
                    if take is not None:
                        self.pending = None
                        self.cond.notify_all()  # the trainer may push the next version
                with self.engine:
                    if take is not None:
                        self.sampler.install(take[1])
                        self.installed = take
                    batch = self._sample(step, need, waited)
                with self.cond:
                    self.queue[step] = batch
                    self.next += 1
                    self.cond.notify_all()
        except BaseException as err:  # handed to the learner's thread, which raises it
            with self.cond:
                self.error = err
                self.cond.notify_all()

    def push(self, version: int, stage: Callable[[], Any]) -> None:
        """Concurrent: the trainer's weights after `version` steps, staged by `stage()` once the thread has taken
        the previous staged copy (dropped when no batch left to sample needs it)."""
        with self.cond:
            needed = version <= version_of(self.last, self.k, self.resumed)
            while needed and self.pending is not None and not self.stopped and self.error is None:
                self.cond.wait()
            if not needed or self.stopped or self.error is not None:
                return
        staged = stage()  # the copy, outside the lock: the thread goes on sampling meanwhile
        with self.cond:
            self.pending = (version, staged)
            self.cond.notify_all()

    # -- handing over --------------------------------------------------------------------------
    def take(self, prompts: list[str]) -> tuple[Batch, int]:
        """The batch of the step the learner trains next and the row `prompts` start at (micro-batches ask for
        consecutive slices); checks that they are the rows Tunix's own data order gives that step."""
        if self.serving is None or self.offset >= len(self.serving.prompts):
            self._next_step()
        batch, offset = self.serving, self.offset
        assert batch is not None
        if batch.prompts[offset : offset + len(prompts)] != prompts:
            raise RunError(
                f"step {batch.step}: the batch sampled ahead holds other prompts than the learner's data order; "
                "rerun with trainer.off_policy.max_staleness=0 and report this"
            )
        self.offset += len(prompts)
        return batch, offset

    def _next_step(self) -> None:
        step = (self.serving.step + 1) if self.serving is not None else self.resumed + 1
        began = time.perf_counter()
        if self.concurrent:
            self.start()
        else:
            self._fill_for(step)
        with self.cond:
            while self.concurrent and step not in self.queue and self.error is None and not self.stopped:
                self.cond.wait()
            self._raise_error()
            batch = self.queue.pop(step, None)
            if batch is None:
                raise RunError(f"step {step}: no batch was sampled for it; lower trainer.max_steps to the data's")
            self.serving, self.offset = batch, 0
        waited = time.perf_counter() - began
        staleness = float(step - 1 - batch.version)
        if batch.samples:
            self.write_samples(batch.samples)
        metrics = {STALENESS_MEAN: staleness, STALENESS_MAX: staleness, TRAINER_WAIT: waited}
        metrics[ROLLOUT_WAIT] = batch.rollout_wait
        if self.concurrent:
            metrics[ROLLOUT_TIME] = batch.rollout_time
        self.on_metrics(step, metrics)

    def _fill_for(self, step: int) -> None:
        """Colocated: sample the steps up to step + k now, with the weights the trainer holds (of step - 1)."""
        while self.next <= min(step + self.k, self.last):
            s = self.next
            self.queue[s] = self._sample(s, step - 1)
            self.next += 1

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    # -- evals and the end ------------------------------------------------------------------------
    @contextlib.contextmanager
    def trainer_weights(self) -> Iterator[None]:
        """Around a mid-run eval (concurrent): the engine samples with the trainer's weights, the thread waits."""
        if not self.concurrent or self.thread is None or self.stopped:  # closed: the engine has them already
            yield
            return
        with self.engine:
            self.sampler.install(self.sampler.stage())
            try:
                yield
            finally:
                assert self.installed is not None
                self.sampler.install(self.installed[1])

    def close(self) -> None:
        """Stop the thread (a batch it is sampling finishes first); concurrent: the engine gets the trainer's final
        weights, for the eval after training."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join()
            with self.engine:
                self.sampler.install(self.sampler.stage())

    # -- checkpoints ---------------------------------------------------------------------------
    def ahead_of(self, step: int) -> list[Batch]:
        """The batches of steps step+1..step+k (those sampled before a checkpoint of `step` that a resumed run needs),
        waiting for the thread to sample the ones it has not yet."""
        wanted = range(step + 1, min(step + self.k, self.last) + 1)
        with self.cond:
            while (
                self.concurrent
                and self.thread is not None
                and self.error is None
                and not self.stopped
                and any(s not in self.queue and not self._is_serving(s) for s in wanted)
            ):
                self.cond.wait()
            self._raise_error()
            held = {b.step: b for b in ([self.serving] if self.serving is not None else []) + list(self.queue.values())}
        missing = [s for s in wanted if s not in held]
        if missing:
            raise RunError(
                f"checkpoint {step}: the batches of steps {missing} were not sampled; cannot store the queue"
            )
        return [held[s] for s in wanted]

    def _is_serving(self, step: int) -> bool:
        return self.serving is not None and self.serving.step == step

    def store(self, step: int, to_host: Callable[[Any], Any]) -> None:
        """Write the batches a resume from checkpoint `step` needs beside it, atomically; prune the files of
        checkpoints orbax has deleted."""
        if self.run_dir is None:
            return
        batches = [
            dataclasses.replace(b, sampled=dataclasses.replace(b.sampled, example=to_host(b.sampled.example)))
            for b in self.ahead_of(step)
        ]
        path = queue_path(self.run_dir, step)
        storage.write_bytes(path, pickle.dumps(batches, protocol=pickle.HIGHEST_PROTOCOL))
        self._prune()

    def _prune(self) -> None:
        """Remove the queue files of steps older than the oldest checkpoint orbax keeps (it deletes the oldest first;
        a step it is still writing has a temporary name, so nothing newer is touched)."""
        root = Path(self.run_dir or "") / QUEUE_DIR
        actor = Path(self.run_dir or "") / "checkpoints" / "actor"
        if self.run_dir is None or storage.is_url(self.run_dir) or not root.is_dir() or not actor.is_dir():
            return
        oldest = min((int(p.name) for p in actor.iterdir() if p.name.isdigit()), default=None)
        for p in root.glob("*.pkl"):
            if oldest is not None and p.stem.isdigit() and int(p.stem) < oldest:
                p.unlink(missing_ok=True)

    def restore(self, step: int, to_device: Callable[[Any], Any]) -> None:
        """Queue the batches checkpoint `step` stored; the next one to sample follows them."""
        assert self.run_dir is not None
        data = storage.read_bytes(check_resume(self.run_dir, step))
        batches: list[Batch] = pickle.loads(data)  # the run's own file, written by `store`
        for b in batches:
            b.sampled = dataclasses.replace(b.sampled, example=to_device(b.sampled.example))
            self.queue[b.step] = b
        self.next = max([step, *self.queue]) + 1

    def save_hook(self, manager: Any, every: int, to_host: Callable[[Any], Any]) -> None:
        """Wrap the checkpoint manager's `save` on this instance: a save due at this step (every `every` steps, or
        forced) stores the queue first, so a committed checkpoint always has its queue file."""
        save = manager.save

        @functools.wraps(save)
        def save_with_queue(step: int, *args: Any, **kwargs: Any) -> Any:
            due = kwargs.get("force") or step % every == 0
            if due:
                self.store(step, to_host)
            saved = save(step, *args, **kwargs)
            if saved and not due:  # saved off schedule (orbax's preemption policy): store it after
                self.store(step, to_host)
            return saved

        manager.save = save_with_queue


class _LearnerSampler(Sampler):
    """The queue's view of a learner (rlexp.tunix.ahead.Ahead): each step's rows in the run's data order, sampled
    under that step's rollout seed."""

    def __init__(self, ahead: Any, rows: Callable[[int], Iterator[dict]], seed: Callable[[int], int]) -> None:
        self.ahead, self.rows, self.seed = ahead, rows, seed
        self._it: Iterator[dict] | None = None
        self._next = -1

    def sample(self, step: int) -> Any:
        if self._it is None or step != self._next:
            self._it = self.rows(step)  # the data order from `step` on
        self._next = step + 1
        data = next(self._it, None)
        if data is None:
            raise RunError(f"step {step}: the train split has no batch left for it; lower trainer.max_steps")
        self.ahead.set_seed(self.seed(step))
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

    t = conf.trainer
    ahead = learner.rlexp_ahead
    queue = OffPolicyQueue(
        staleness(t),
        _LearnerSampler(ahead, rows, seed),
        start_step=start_step,
        last_step=t.max_steps,
        concurrent=concurrent(conf),
        on_metrics=on_metrics,
        write_samples=write_samples,
        run_dir=run_dir,
    )
    if start_step:
        queue.restore(start_step, to_device)
    ahead.take = queue.take
    if queue.concurrent:
        ahead.stage_updates(queue.push)
    queue.save_hook(learner.rl_cluster.actor_trainer.checkpoint_manager, t.checkpoint_every, to_host)
    return queue
