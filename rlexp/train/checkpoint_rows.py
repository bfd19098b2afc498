"""Metrics rows travel with the checkpoint that covers them: a process killed after a checkpoint loses no row.

Tunix saves step k's checkpoint right after update k, but rlexp writes a step's row to metrics.jsonl only once
the row is whole: row k-1 before update k+1, row k before update k+2 (Tunix publishes a step's actor metrics
one update late, and a step's time is taken when its update has ended). A process killed between the commit
and those writes used to resume from checkpoint k without rows k-1 and k, for good.

So a save that will happen first publishes step k's actor and rollout metrics and puts a copy of every row not yet
written into the checkpoint's custom metadata (`rlexp_rows`), which orbax commits with the checkpoint. On
resume, the rows metrics.jsonl lacks are put back from it, and written in order with the next ones; row k
then lacks only the save's own time (`perf/checkpoint_time_sec`). Other state of the step travels the same way
(`extra`: env.adaptive's task weights, read back by `carried`). A mid-run eval due at step k that the
process did not finish is run again from checkpoint k before training resumes (rlexp.train.session).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import jax

from rlexp.train.metrics import MetricsCollector
from rlexp.train.stepclock import STEP, StepClock
from rlexp.tunix.trainer import (
    publish_buffered_rollout_metrics,
    publish_pending_train_metrics,
    restored_checkpoint_metadata,
)

log = logging.getLogger(__name__)

ROWS_KEY = "rlexp_rows"


def carry_rows(
    cluster: Any,
    collector: MetricsCollector,
    clock: StepClock,
    every: int,
    updates_per_step: int = 1,
    extra: Callable[[int], dict[str, Any]] | None = None,
) -> None:
    """Wrap the actor trainer's `checkpoint_manager.save` (this instance): a save that will happen carries the
    rows of its step and before that metrics.jsonl does not hold yet, and `extra(step)`'s keys. Saves are numbered
    by optimizer updates, `updates_per_step` (num_iterations) to a step of `every` (checkpoint_every)."""
    trainer = cluster.actor_trainer
    manager = trainer.checkpoint_manager
    save = manager.save

    @functools.wraps(save)
    def save_with_rows(update: int, model: Any, *args: Any, **kwargs: Any) -> Any:
        step = update // updates_per_step
        if kwargs.get("force") or update % (every * updates_per_step) == 0:
            from flax import nnx

            jax.block_until_ready(nnx.state(model))  # the update has ended: its time is known
            publish_pending_train_metrics(trainer)  # step `step`'s loss, KL and grad norm, now not next update
            publish_buffered_rollout_metrics(cluster)  # its rewards and lengths, now not at the next rollout
            rows = collector.peek_until(step)
            if rows and rows[-1]["step"] == step and STEP not in rows[-1]:
                rows[-1][STEP] = clock.peek()  # the step's time, before the save (taken after it otherwise)
            more = extra(step) if extra is not None else {}
            kwargs["custom_metadata"] = {**(kwargs.get("custom_metadata") or {}), ROWS_KEY: rows, **more}
        return save(update, model, *args, **kwargs)

    manager.save = save_with_rows


def put_back_rows(
    trainer: Any, collector: MetricsCollector, written: set[int], evals: dict[str, Any], updates_per_step: int = 1
) -> list[int]:
    """Put the restored checkpoint's rows that metrics.jsonl lacks (`written`: the steps it holds) back into the
    collector, each with its mid-run eval when evals.json has it; the steps put back, for the log."""
    rows = restored_checkpoint_metadata(trainer).get(ROWS_KEY) or []
    back = []
    for row in rows:
        step = int(row["step"])
        if step in written or step > trainer.train_steps // updates_per_step:
            continue
        metrics = {k: v for k, v in row.items() if k != "step"}
        if (ev := evals.get(str(step))) is not None:
            metrics.update({f"eval/{k}": v for k, v in ev.items() if k != "step"})
        collector.add(step, metrics)
        back.append(step)
    return back


def carried(trainer: Any, key: str) -> Any:
    """What the restored checkpoint carried under `key` (`carry_rows`' extra), or None."""
    return restored_checkpoint_metadata(trainer).get(key)
