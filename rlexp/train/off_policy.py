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

Concurrent, a GRPO-family pass that generates once (AlgorithmSpec.pipelines_scoring) runs on two threads: one
batch's reward functions (a judge, a sandbox, a reward service) run while the next batch generates. Generations go
one at a time in step order, each with its batch's weights and seed, and so do scorings; the batches are those one
thread samples, and a step waits for max(sampling, scoring) rather than their sum.

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

    # pipelined (OffPolicyQueue(pipelined=True)): `sample` split in three, the engine's part gated
    def prepare(self, step: int) -> Any:  # the step's rows, asked in step order
        return None

    def seed(self, step: int) -> None:  # the step's rollout seed, set right before its generation
        return None

    def sample_prepared(self, step: int, prepared: Any) -> Any:  # the pass, its generation through `turn`
        return self.sample(step)


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
        pipelined: bool = False,
    ) -> None:
        self.k, self.sampler, self.concurrent = k, sampler, concurrent
        self.pipelined = concurrent and pipelined  # two threads: one batch scores while the next one samples
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
        self.threads: list[threading.Thread] = []
        self._local = threading.local()  # the batch being sampled in this thread (its samples.jsonl rows)
        self.turn = self.scoring_turn = start_step + 1  # pipelined: the steps whose generation, scoring come next
        # held while a batch is scored, and around a mid-run eval (reward functions: one batch at a time); reentrant,
        # as an eval that scores through the learner's gated rewards takes it again
        self.scoring = threading.RLock()

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
        if self.concurrent and not self.threads:
            self.installed = (self.resumed, self.sampler.stage())
            with self.engine:
                self.sampler.install(self.installed[1])
            self.turn = self.scoring_turn = self.next  # after a resumed run's restored batches
            loop, n = (self._run_pipelined, 2) if self.pipelined else (self._run, 1)
            self.threads = [threading.Thread(target=loop, name=f"rlexp-off-policy-{i}", daemon=True) for i in range(n)]
            for thread in self.threads:
                thread.start()

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

    def _run_pipelined(self) -> None:
        """One of two threads: claims the next step (its rows in step order) and runs its pass, whose generation
        (`turn`) and scoring (`scoring_turn`) go one batch at a time, in step order; so one batch scores while the
        next one samples, each sampled with the weights and seed it would have had alone."""
        try:
            while True:
                with self.cond:
                    if self.stopped or self.error is not None or self.next > self.last:
                        return
                    step = self.next
                    self.next += 1
                    prepared = self.sampler.prepare(step)
                batch = Batch(step, version_of(step, self.k, self.resumed), None)
                self._local.batch = batch
                began = time.perf_counter()
                try:
                    batch.sampled = self.sampler.sample_prepared(step, prepared)
                finally:
                    self._local.batch = None
                batch.rollout_time = time.perf_counter() - began - batch.rollout_wait
                with self.cond:
                    self.queue[step] = batch
                    self.cond.notify_all()
        except _Stopped:
            return
        except BaseException as err:  # handed to the learner's thread, which raises it
            with self.cond:
                self.error = err
                self.cond.notify_all()

    def _wait_turn(self, ready: Callable[[], bool]) -> None:
        """Under `cond`: wait until `ready()`; _Stopped when the queue closes or another thread failed first."""
        while not ready():
            if self.stopped or self.error is not None:
                raise _Stopped
            self.cond.wait()

    @contextlib.contextmanager
    def generation(self) -> Iterator[None]:
        """Around the rollout engine's generation (rlexp.tunix.sampler's cluster calls it): on a pipelined thread,
        the batch's turn, its weights installed and its seed set; elsewhere (evals, other modes) nothing."""
        batch = self.sampling()
        if not self.pipelined or batch is None:
            yield
            return
        began = time.perf_counter()
        with self.cond:

            def ready() -> bool:
                have = self.installed is not None and self.installed[0] == batch.version
                return self.turn == batch.step and (
                    have or (self.pending is not None and self.pending[0] == batch.version)
                )

            self._wait_turn(ready)
            take = self.pending if self.installed is None or self.installed[0] != batch.version else None
            if take is not None:
                self.pending = None
                self.cond.notify_all()  # the trainer may push the next version
        batch.rollout_wait = time.perf_counter() - began
        try:
            with self.engine:
                if take is not None:
                    self.sampler.install(take[1])
                    self.installed = take
                self.sampler.seed(batch.step)
                yield
        finally:
            with self.cond:
                self.turn = batch.step + 1
                self.cond.notify_all()

    @contextlib.contextmanager
    def scored(self) -> Iterator[None]:
        """Around a batch's reward functions (rlexp.tunix.learners.gate_rewards): on a pipelined thread, one batch at
        a time in step order; elsewhere (an eval on the trainer's thread) one at a time too."""
        batch = self.sampling()
        if not self.pipelined or batch is None:
            with self.scoring:
                yield
            return
        with self.cond:
            self._wait_turn(lambda: self.scoring_turn == batch.step)
        try:
            with self.scoring:
                yield
        finally:
            with self.cond:
                self.scoring_turn = batch.step + 1
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
        if not self.concurrent or not self.threads or self.stopped:  # closed: the engine has them already
            yield
            return
        with self.engine, self.scoring:  # pipelined: a batch being scored finishes first (reward functions)
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
        if self.threads:
            for thread in self.threads:
                thread.join()
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
                and self.threads
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


class _Stopped(Exception):
    """A pipelined thread's pass cut short: the queue closed (or the other thread failed) while it waited its turn."""
