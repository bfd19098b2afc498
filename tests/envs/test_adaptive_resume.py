"""env.adaptive across SIGTERM: the checkpoint carries the running shares of its step, and the resumed run's weights,
batches, rewards and losses equal an uninterrupted run's (real Tunix GRPO runs of rg_demo, in-process)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rlexp.config.schema import RewardFnConfig
from tests.helpers import compose_cfg
from tests.resume import assert_same_steps, sigterm_then_resume, train_steps

pytestmark = pytest.mark.slow

TASKS = ("chain_sum", "products", "letter_counting")


def run(run_dir: Path, overrides: list[str]) -> None:
    """As `python -m rlexp` runs it (rlexp.main: the env resolved, then planned), plus a zero-weight reward that
    sends SIGTERM at a chosen training call (tests.resume)."""
    from rlexp.config.load import to_config
    from rlexp.envs import resolve
    from rlexp.train.plan import make_plan
    from rlexp.train.run import train

    cfg = compose_cfg(overrides)
    conf = resolve(to_config(cfg))
    extra = RewardFnConfig(fn="test_sigterm_at_call", weight=0.0, range=[0.0, 1.0])
    conf = dataclasses.replace(conf, reward=dataclasses.replace(conf.reward, functions=[*conf.reward.functions, extra]))
    train(make_plan(conf, cfg, str(run_dir), lambda: None), conf, cfg)


def test_sigterm_then_resume_draws_and_learns_as_the_uninterrupted_run(tmp_path: Path) -> None:
    overrides = [
        "experiment=rg_demo",
        "logger=none",
        "trainer.max_steps=10",
        "trainer.eval_every=5",
        "trainer.checkpoint_every=5",
        "trainer.eval_prompts=12",
        "env.adaptive.enabled=true",
        "env.adaptive.rate=0.5",
        # never solved by tiny_rg: its weight moves from step 1 on, so the shares at the checkpoint are not the start's
        "env.tasks.chain_sum.config={min_terms: 3, max_terms: 3, min_digits: 3, max_digits: 3}",
    ]
    # during step 4's rollout: its rewards were observed (the shares moved), but the forced checkpoint is step 3's
    full, interrupted = sigterm_then_resume(lambda d: run(d, overrides), tmp_path, 4, 3)
    reference = train_steps(full)
    names = [f"env/{t}/{k}" for t in TASKS for k in ("weight", "learnable", "reward_mean")]
    # the weights had moved by the checkpoint (step 3): a resume that restored nothing would draw otherwise
    assert reference[4]["env/chain_sum/weight"] < 0.25 < 1 / 3 == pytest.approx(reference[1]["env/chain_sum/weight"])
    assert_same_steps(full, interrupted, range(1, 11), ("rewards/sum", "loss", "kl", "completions/mean_length", *names))
