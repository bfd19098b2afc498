"""Tunix's actor trainer and cluster, reached where they expose no public name (rows `trainer` of
rlexp.tunix.privates).

- Stopping between steps: Tunix publishes a step's actor metrics one update late and exposes no public flush; a
  graceful stop (SIGTERM, reward error budget) and a checkpoint's rows publish them so the last step is whole.
- Tunix's own progress bar: rlexp draws its own (`without_progress_bar`).
- `profile.steps`: the trainer's profiler is given once the restored step is known (`give_profiler`).
"""

from __future__ import annotations

from typing import Any


class _NoProgressBar:
    """Stands in for Tunix's `ProgressBar`: the calls it receives, and nothing drawn or looked up."""

    def update_metrics(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def without_progress_bar(trainer: Any) -> Any:
    """Keep Tunix's trainer from drawing its own tqdm bar ("Actor Training", with loss and perplexity).

    On a terminal it was drawn beside rlexp's bar, the two overwriting each other's line; rlexp's bar and its
    per-10 % lines in logs show the step, the reward and the ETA. Tunix creates its bar in `train()` only when
    none is set and ends with `_pbar = None`, so a stand-in set before `train()` is used for the whole run. Its
    metric look-ups also ran with the bar disabled (off a terminal): ~1.3 ms a step.
    """
    trainer._pbar = _NoProgressBar()
    return trainer


def publish_pending_train_metrics(train_ctx: Any) -> None:
    """Write the actor metrics Tunix holds back for the next update (loss, KL, grad norm)."""
    train_ctx._write_train_metrics()


def publish_buffered_rollout_metrics(cluster: Any) -> None:
    """Log the rollout metrics (rewards, lengths, rlexp's metric_fn outputs) that Tunix's RLCluster holds until the
    next step's first metric arrives. Tunix logs the same buffers again then, at the same step, aggregated over
    everything they hold by that time; rlexp's collector keeps the later value. The buffers are copied first:
    a rollout thread may be adding to them."""
    import dataclasses

    for buffered in list(cluster._buffered_train_metrics):
        snapshot = {name: (list(values), op) for name, (values, op) in list(buffered.metrics.items())}
        cluster._log_metrics(dataclasses.replace(buffered, metrics=snapshot))


def restored_checkpoint_metadata(train_ctx: Any) -> dict[str, Any]:
    """The custom metadata of the checkpoint the trainer restored ({} when it started fresh)."""
    return dict(getattr(train_ctx, "_restored_custom_metadata", None) or {})


def trains_lora_only(train_ctx: Any) -> bool:
    """Whether the trainer's checkpoints hold only LoRA parameters."""
    return bool(getattr(train_ctx, "_lora_enabled", False))


def give_profiler(trainer: Any, options: Any, max_iterations: int) -> None:
    """Replace the profiler Tunix's trainer built in its constructor with one of `options` (tunix.sft.profiler's
    ProfilerOptions), counting from the trainer's restored iteration. Tunix 0.1.7 keeps the profiler and the
    iteration count in `_prof` and `_iter_steps` (PeftTrainer.__init__)."""
    from tunix.sft.profiler import Profiler

    trainer._prof = Profiler(trainer._iter_steps, max_iterations, options)


def stop_open_trace() -> bool:
    """Stop a trace Tunix started but did not stop (training ended early: a signal, a reward error budget), so its
    file is written; True if one was open."""
    import jax
    from tunix.sft.profiler import Profiler

    if not Profiler._is_active:
        return False
    jax.profiler.stop_trace()
    Profiler._is_active = False
    return True
