"""rlexp.train.optimizer against optax: the learning rate of every update equals optax's own schedule compiled with
its numbers baked in, and whole AdamW updates equal optax.adamw's, bit for bit (the command that shares one train
step across schedules: tests/train/test_compile_cache.py)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlexp.config.schema import TrainerConfig
from rlexp.train.optimizer import build_optimizer, learning_rate, schedule_numbers
from tests.helpers import SHORT, rlexp_env, run_rlexp, sigterm_at_progress


def optax_schedule(t: TrainerConfig) -> optax.Schedule:
    """The schedule the trainer documents, composed of optax's own schedules (linear warmup from 0 over
    warmup_ratio x max_steps, then cosine to final_lr_ratio x lr, or constant), in optimizer updates."""
    updates = t.max_steps * t.num_iterations
    warmup = int(t.warmup_ratio * t.max_steps) * t.num_iterations
    if t.lr_schedule == "constant":
        decay = optax.constant_schedule(t.learning_rate)
    else:
        decay = optax.cosine_decay_schedule(t.learning_rate, max(1, updates - warmup), alpha=t.final_lr_ratio)
    if warmup == 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, t.learning_rate, warmup), decay], [warmup])


def _bits(x: jax.Array) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.int32)


GRID = [
    TrainerConfig(
        learning_rate=lr,
        max_steps=steps,
        warmup_ratio=warmup,
        lr_schedule=kind,
        final_lr_ratio=alpha,
        num_iterations=iterations,
    )  # fmt: skip
    for lr, steps, warmup, kind, alpha, iterations in itertools.product(
        [0.1234567], [7, 300], [0.0, 0.37], ["cosine", "constant"], [0.0, 0.1], [1, 2]
    )
    if kind == "cosine" or alpha == 0.0
]


def test_every_update_s_rate_is_optax_s_compiled_schedule_bit_for_bit() -> None:
    ours = jax.jit(jax.vmap(learning_rate, in_axes=(0, None)))  # one program: the numbers are arguments
    ours_one = jax.jit(learning_rate)
    for t in GRID:
        counts = jnp.arange(t.max_steps * t.num_iterations + 3, dtype=jnp.int32)
        schedule = optax_schedule(t)
        want = jax.jit(jax.vmap(schedule))(counts)  # XLA folds the baked numbers, as in a train step
        numbers = {k: jnp.asarray(v) for k, v in schedule_numbers(t).items()}
        got = ours(counts, numbers)
        assert np.array_equal(_bits(want), _bits(got)), (t, np.asarray(want), np.asarray(got))
        want_one = jax.jit(schedule)  # unbatched, as the train step runs it
        for c in (0, 1, t.max_steps // 2, t.max_steps * t.num_iterations - 1):
            assert _bits(want_one(jnp.int32(c))) == _bits(ours_one(jnp.int32(c), numbers)), (t, c)


@pytest.mark.parametrize("grad_clip", [0.0, 0.5])
def test_updates_equal_optax_adamw_s_with_the_same_schedule(grad_clip: float) -> None:
    t = TrainerConfig(learning_rate=3e-3, max_steps=6, warmup_ratio=0.34, final_lr_ratio=0.1, grad_clip=grad_clip,
                      weight_decay=0.01, adam_b1=0.8)  # fmt: skip
    adamw = optax.adamw(optax_schedule(t), b1=t.adam_b1, b2=t.adam_b2, weight_decay=t.weight_decay)
    reference = optax.chain(optax.clip_by_global_norm(t.grad_clip), adamw) if grad_clip else adamw
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {"w": jax.random.normal(keys[0], (4, 8)), "b": jax.random.normal(keys[1], (8,)).astype(jnp.bfloat16)}

    def run(tx: optax.GradientTransformation) -> list:
        @jax.jit
        def step(params, state, key):  # noqa: ANN001, ANN202
            grads = jax.tree.map(lambda p: jax.random.normal(key, p.shape, p.dtype), params)
            updates, state = tx.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        p, state, out = params, tx.init(params), []
        for k in jax.random.split(keys[2], t.max_steps + 2):
            p, state = step(p, state, k)
            out.append(jax.tree.map(np.asarray, p))
        return out

    for want, got in zip(run(reference), run(build_optimizer(t)), strict=True):
        for name in params:
            assert np.array_equal(want[name].view(np.uint8), got[name].view(np.uint8)), name


# A process whose optimizer is optax.adamw with its own schedule: the optimizer state every rlexp checkpoint held
# before rlexp.train.optimizer (cluster.py imports build_optimizer after this replaced it)
OLD_OPTIMIZER = """import optax
import rlexp.train.optimizer as optimizer

def build_optimizer(t):
    adamw = optax.adamw(lambda count: t.learning_rate, b1=t.adam_b1, b2=t.adam_b2, weight_decay=t.weight_decay)
    return optax.chain(optax.clip_by_global_norm(t.grad_clip), adamw) if t.grad_clip > 0 else adamw

optimizer.build_optimizer = build_optimizer
"""


@pytest.mark.slow
def test_a_checkpoint_with_the_old_optimizer_state_is_refused_in_one_line(tmp_path: Path) -> None:
    """A run stopped by an rlexp from before the schedule moved into the optimizer state, resumed by this one: one
    line naming the checkpoint and what to do, before JAX starts, not orbax's tree mismatch after the models load."""
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "sitecustomize.py").write_text(OLD_OPTIMIZER)
    old = rlexp_env()
    old["PYTHONPATH"] = os.pathsep.join([old["PYTHONPATH"], str(tmp_path / "old")])
    args = [*SHORT, f"hydra.run.dir={tmp_path / 'run'}"]
    code, rest = sigterm_at_progress(*args, step_line="rlexp: step 5/8", env=old)
    assert code == 1 and "checkpoint saved" in rest, rest[-2000:]
    out = run_rlexp(*args, python=["-X", "importtime"])
    imported = {x.rsplit("|", 1)[-1].strip() for x in out.stderr.splitlines() if x.startswith("import time:")}
    assert "jax" not in imported  # refused by the run's plan, before JAX and the models load
    lines = [x for x in out.stderr.strip().splitlines() if not x.startswith("import time:")]
    assert out.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"rlexp: error: {tmp_path / 'run'}"), lines
    assert "optimizer state was written before rlexp kept the learning-rate schedule in it" in lines[0]
    assert "resume with the rlexp that wrote it" in lines[0]
