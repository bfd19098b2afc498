"""JAX's persistent compilation cache: filled by a run, reused by a run with another learning-rate schedule, off
with one key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SHORT, compose_conf, run_rlexp

pytestmark = pytest.mark.slow


def test_cache_is_filled_and_can_be_switched_off(tmp_path: Path) -> None:
    args = [
        *SHORT,
        "trainer.max_steps=2",
        "trainer.eval_every=2",
        "trainer.checkpoint_every=2",
        # 16 prompts x 4 samples: the sampled evals run the training rollout's 64-row programs, one pair fewer to
        # compile in this cold run (rlexp.train.evaluate.sample_in_chunks)
        "trainer.eval_samples=4",
        f"hydra.run.dir={tmp_path / 'on'}",
        f"compile_cache.dir={tmp_path / 'cache-on'}",
    ]
    out = run_rlexp(*args)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list((tmp_path / "cache-on").iterdir())) > 10  # every jitted program of the run
    # another length, peak rate, warmup and schedule kind run the same train step: the schedule's numbers are in
    # the optimizer state (rlexp.train.optimizer), not compiled into the step
    other = [
        "trainer.max_steps=3",
        "trainer.learning_rate=3e-3",
        "trainer.warmup_ratio=0.34",
        "trainer.lr_schedule=constant",
    ]
    again = run_rlexp(*args, *other, f"hydra.run.dir={tmp_path / 'other'}")
    assert again.returncode == 0, again.stderr[-2000:]
    steps = [p.name for p in (tmp_path / "cache-on").iterdir() if p.name.startswith("jit__train_step-")]
    assert len(steps) == 1, steps
    # off: the run's JAX set-up (rlexp.train.run.setup_jax, what the command above ran first) in this process,
    # not a second cold training run; tests/conftest.py puts JAX's flags back after the test
    import jax

    from rlexp.train.run import setup_jax

    setup_jax(compose_conf([f"compile_cache.dir={tmp_path / 'cache-off'}", "compile_cache.enabled=false"]))
    assert jax.config.jax_enable_compilation_cache is False
    jax.jit(lambda x: x * 3 + 1)(jax.numpy.arange(5.0)).block_until_ready()
    assert not (tmp_path / "cache-off").exists()
