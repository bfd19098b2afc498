"""What runs between Tunix training steps: metrics out, evals, samples, progress, graceful stop.

Tunix calls `on_train_step_end` after every optimizer update of the actor (in the main thread,
before it saves that step's checkpoint). rlexp uses it to flush finished steps to
metrics.jsonl and the tracker, to run the periodic eval, to reseed the next rollout, and to
stop cleanly (checkpoint first) after SIGTERM / Ctrl-C or a reward error budget breach.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tunix.sft.hooks import TrainingHooks

from rlexp.errors import RlexpError
from rlexp.train.collectives import settle
from rlexp.tunix.trainer import publish_pending_train_metrics, trains_lora_only

if TYPE_CHECKING:
    from rlexp.train.graceful_stop import GracefulStop
    from rlexp.train.metrics import MetricsCollector
    from rlexp.train.stepclock import StepClock

log = logging.getLogger(__name__)

# How long a process waits at a step for the others (a slow eval or compile on one of them).
AGREE_TIMEOUT_MS = 60 * 60 * 1000


def agree(step: int, *flags: bool) -> tuple[bool, ...]:
    """Each flag OR-ed over all JAX processes at `step` (identity with one process).

    Processes must stop after the same step: the checkpoint save is collective, and a process
    that trained on alone would wait forever in the next step's collectives. SIGTERM reaches
    the tasks of a Slurm job or the pods of a JobSet at slightly different times. The flags
    travel through the coordination service (as orbax's barriers do), not through an XLA
    collective: an all-gather issued here met the step's own collectives on the other process
    (2 CPU processes, gloo: "collective mismatch" abort in the first step).
    """
    import jax

    if jax.process_count() == 1:
        return tuple(flags)
    from rlexp.compat.jax import exchange

    votes = exchange(f"rlexp/agree/{step}", "".join("1" if f else "0" for f in flags), AGREE_TIMEOUT_MS)
    return tuple(any(v[i] == "1" for v in votes) for i in range(len(flags)))


class StopTraining(Exception):
    """Raised inside a step hook to leave Tunix's loop after the step's checkpoint is saved."""

    def __init__(self, reason: str, cause: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason, self.cause = reason, cause


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What the step hooks read and call of a training session, and nothing else (rlexp.train.session)."""

    start_step: int  # the restored checkpoint's step
    eval_every: int
    max_steps: int
    collector: MetricsCollector
    clock: StepClock
    stop: GracefulStop
    flush_metrics: Callable[[int], None]  # write the finished steps' rows up to a step
    record_files: Callable[[], None]  # record the files of the checkpoints committed since (process 0)
    set_rollout_seed: Callable[[int], None]
    run_eval: Callable[..., dict[str, float]]
    progress: Callable[[int], None]
    reward_error: Callable[[], RlexpError | None]  # the reward error budget's breach, once there is one
    global_steps: Callable[[], int]  # Tunix's count of finished global steps
    updates_per_step: int = 1  # trainer.num_iterations: Tunix's train steps (optimizer updates) per rlexp step


class StepHooks(TrainingHooks):
    """Tunix TrainingHooks acting through a session's StepContext.

    Tunix calls `on_train_step_end` one step late (it overlaps metric I/O with the next step)
    and once more from close(), so rlexp acts in `on_train_step_start` instead: it runs before
    every optimizer update, after that step's rollout, with `train_steps` = updates done so far.
    A step's time is taken in `on_train_end`, which ends each update once it has finished.

    An rlexp step is one rollout (a GRPO step): `updates_per_step` (num_iterations) optimizer updates, so the
    hooks act at the first update of a rollout and time a step at its last; Tunix's `train_steps`, max_steps
    and checkpoint numbers count updates (rlexp.train.cluster scales them).
    """

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx
        self._seen = -1
        self._lapped = -1  # the last step whose time was taken

    def on_train_start(self, train_ctx: Any) -> None:
        pass

    def on_train_end(self, train_ctx: Any) -> None:
        # Tunix calls this when an actor update's `train` call ends, the update finished (rlexp.train.stepclock)
        s = self.ctx
        updates, n = train_ctx.train_steps, s.updates_per_step
        if updates % n:  # a rollout's earlier iterations: its step ends with its last update
            return
        done = updates // n
        if done > max(s.start_step, self._lapped):
            self._lapped = done
            s.collector.add(done, s.clock.lap())
            s.progress(done)

    def on_train_step_end(self, train_ctx: Any, train_step: int, train_loss: float) -> None:
        pass

    def on_eval_step_start(self, train_ctx: Any) -> None:
        pass

    def on_eval_step_end(self, train_ctx: Any, eval_loss: float) -> None:
        pass

    def on_train_step_start(self, train_ctx: Any) -> None:
        s = self.ctx
        updates, n = train_ctx.train_steps, s.updates_per_step  # model state = after `updates` updates
        if updates % n or updates // n == self._seen:  # not a rollout's first update, or seen
            return
        done = self._seen = updates // n  # rollout steps done
        s.flush_metrics(done - 1)  # actor metrics of step `done` are published during the next update
        s.record_files()  # the steps orbax has committed since
        s.set_rollout_seed(done + 2)  # the rollout of step done+1 has already run
        if done > s.start_step and done % s.eval_every == 0 and done < s.max_steps:
            s.run_eval(done, in_actor_update=True)
        signalled, reward_failed = agree(done, s.stop.requested is not None, s.reward_error() is not None)
        if reward_failed:
            cause = s.reward_error() or RlexpError("reward error budget exceeded on another process")
            self._stop(train_ctx, updates, "reward error budget exceeded", cause)
        if signalled:
            s.stop.stopped = s.stop.requested or "stop requested on another process"
            self._stop(train_ctx, updates, s.stop.stopped)

    def _stop(self, train_ctx: Any, step: int, reason: str, cause: RlexpError | None = None) -> None:
        """Save a checkpoint at `step` (Tunix's count: optimizer updates) unless saved, and leave the loop."""
        # Tunix publishes a step's actor metrics (loss, kl, grad_norm) one update late; publish
        # them now so the last completed step is whole in metrics.jsonl before training stops.
        publish_pending_train_metrics(train_ctx)
        settle()  # orbax's barriers are collectives; the rollout thread's may still run (rlexp.train.collectives)
        # A stop right after a checkpoint_every step finds that step saved already (orbax refuses twice).
        if step and train_ctx.checkpoint_manager.latest_step() != step:
            train_ctx.checkpoint_manager.save(
                step,
                train_ctx.model,
                train_ctx.optimizer,
                save_only_lora_params=trains_lora_only(train_ctx),
                force=True,
                # Tunix records global_steps + 1 because its own saves run before the increment;
                # here, between steps, the count of finished global steps is already current.
                custom_metadata={
                    **train_ctx.custom_checkpoint_metadata(),
                    "global_step": self.ctx.global_steps(),
                },
            )
        train_ctx.checkpoint_manager.close()
        raise StopTraining(reason, cause)
