"""The trainer's optimizer: AdamW whose learning-rate schedule reads its numbers from the optimizer state.

optax's schedules close over Python numbers (the peak rate, the warmup and decay lengths), and JAX compiles those
into the train step as constants: each learning rate, `max_steps`, `warmup_ratio` or `lr_schedule` compiled a
train step of its own, so every trial of a learning-rate sweep recompiled it (minutes on a TPU slice). Here they
are leaves of the optimizer state (`schedule`), so runs that differ only in them share one compiled step, a
persistent-cache hit after the first.

Each update's rate is optax's own arithmetic: `optax.linear_schedule(0, lr, warmup)` joined
(`optax.join_schedules`) to `optax.cosine_decay_schedule(lr, updates - warmup, alpha=final_lr_ratio)` or to a
constant `lr`, the same float32 operations on the same float32 values, so the updates are bit for bit
`optax.adamw`'s with that schedule (tests/train/test_optimizer.py checks both against optax). Counts are
optimizer updates, `trainer.num_iterations` per step, as optax counts them.

The state holds no `hyperparams` field: Tunix would log one as the step's learning rate, read from the state
while it buffers a step's metrics, so a row would show a later update's rate.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rlexp.config.schema import TrainerConfig


class ScheduledState(NamedTuple):
    """`count` updates so far; the `schedule`'s numbers (schedule_numbers); AdamW's own state."""

    count: jax.Array
    schedule: dict[str, jax.Array]
    inner_state: optax.OptState


def schedule_numbers(t: TrainerConfig) -> dict[str, np.ndarray]:
    """The schedule of `t` as the float32 / int32 numbers of the program XLA compiles from optax's schedule.

    XLA folds a schedule's constants before it compiles: `x / T` becomes `x * (1 / T)`, `pi * x / T` becomes
    `x * (pi * (1 / T))` and `(1 - alpha) * (0.5 * y)` becomes `y * (0.5 * (1 - alpha))`, each folded product or
    quotient rounded once to float32. These are those folded numbers, computed here as XLA computes them, so
    the same operations on them give the same bits (a Python float meets float32 as np.float32 rounds it)."""
    updates = t.max_steps * t.num_iterations
    warmup = int(t.warmup_ratio * t.max_steps) * t.num_iterations
    decay = np.float32(max(1, updates - warmup))
    one = np.float32(1)
    return {
        "peak_learning_rate": np.float32(t.learning_rate),
        "warmup_updates": np.int32(warmup),
        "inverse_warmup_updates": one / np.float32(max(1, warmup)),
        "decay_updates": decay,
        "radians_per_update": np.float32(np.pi) * (one / decay),
        "half_decay_span": np.float32(0.5) * np.float32(1 - t.final_lr_ratio),
        "final_lr_ratio": np.float32(t.final_lr_ratio),
        "cosine": np.int32(t.lr_schedule != "constant"),
    }


def learning_rate(count: jax.Array, schedule: dict[str, jax.Array]) -> jax.Array:
    """The rate of update `count` (int32): optax.join_schedules([linear warmup from 0, decay], [warmup]), in the
    operations of its compiled program (schedule_numbers)."""
    peak, warmup = schedule["peak_learning_rate"], schedule["warmup_updates"]
    # optax.linear_schedule(0.0, peak, warmup): (1 - clip(count, 0, T) / T) * (0 - peak) + peak; the where below
    # never takes it when warmup is 0 (optax then had no warmup schedule at all), so T is kept >= 1
    done = jnp.clip(count, 0, jnp.maximum(warmup, 1)).astype(jnp.float32)
    warm = (1 - done * schedule["inverse_warmup_updates"]) * (-peak) + peak
    # optax.cosine_decay_schedule(peak, decay_updates, alpha) at count - warmup (exponent 1):
    # peak * ((1 - alpha) * 0.5 * (1 + cos(pi * min(count, T) / T)) + alpha)
    decayed = jnp.minimum((count - warmup).astype(jnp.float32), schedule["decay_updates"])
    angle = decayed * schedule["radians_per_update"]
    cosine = ((jnp.cos(angle) + 1) * schedule["half_decay_span"] + schedule["final_lr_ratio"]) * peak
    decay = jnp.where(schedule["cosine"] > 0, cosine, peak)
    return jnp.where(count < warmup, warm, decay)


def build_optimizer(t: TrainerConfig) -> optax.GradientTransformation:
    """optax.adamw (b1, b2, weight decay of `t`) behind global-norm clipping (`grad_clip` > 0), scaled by the
    schedule of `t` held in the state."""
    parts = [optax.clip_by_global_norm(t.grad_clip)] if t.grad_clip > 0 else []
    # optax.adamw is chain(scale_by_adam, add_decayed_weights, scale_by_learning_rate): the last is done below
    inner = optax.chain(
        *parts, optax.scale_by_adam(b1=t.adam_b1, b2=t.adam_b2), optax.add_decayed_weights(t.weight_decay)
    )
    numbers = schedule_numbers(t)

    def init(params: Any) -> ScheduledState:
        schedule = {k: jnp.asarray(v) for k, v in numbers.items()}
        return ScheduledState(jnp.zeros([], jnp.int32), schedule, inner.init(params))

    def update(updates: Any, state: ScheduledState, params: Any = None) -> tuple[Any, ScheduledState]:
        rate = learning_rate(state.count, state.schedule)
        updates, inner_state = inner.update(updates, state.inner_state, params)
        step_size = -1 * rate  # optax.scale_by_schedule of scale_by_learning_rate's `-1 * schedule(count)`
        updates = jax.tree.map(lambda g: jnp.array(step_size, dtype=g.dtype) * g, updates)
        return updates, ScheduledState(optax.safe_increment(state.count), state.schedule, inner_state)

    return optax.GradientTransformation(init, update)
