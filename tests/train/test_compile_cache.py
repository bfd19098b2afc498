"""JAX's persistent compilation cache: filled by a run, off with one key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SHORT, run_rlexp

pytestmark = pytest.mark.slow


def train(tmp_path: Path, name: str, *extra: str) -> None:
    args = [
        *SHORT,
        "trainer.max_steps=2",
        "trainer.eval_every=2",
        "trainer.checkpoint_every=2",
        # 16 prompts x 4 samples: the sampled evals run the training rollout's 64-row programs, one pair fewer to
        # compile in these cold runs (rlexp.train.evaluate.sample_in_chunks)
        "trainer.eval_samples=4",
        f"hydra.run.dir={tmp_path / name}",
    ]
    out = run_rlexp(*args, *extra)
    assert out.returncode == 0, out.stderr[-2000:]


def test_cache_is_filled_and_can_be_switched_off(tmp_path: Path) -> None:
    train(tmp_path, "on", f"compile_cache.dir={tmp_path / 'cache-on'}")
    assert len(list((tmp_path / "cache-on").iterdir())) > 10  # every jitted program of the run
    train(tmp_path, "off", f"compile_cache.dir={tmp_path / 'cache-off'}", "compile_cache.enabled=false")
    assert not (tmp_path / "cache-off").exists()
