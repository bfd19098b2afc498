"""env.adaptive across SIGTERM: the checkpoint carries the running shares of its step, and the resumed run's weights,
batches, rewards and losses equal an uninterrupted run's (real Tunix GRPO runs of rg_demo, in-process)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest

from rlexp.config.schema import RewardFnConfig
from rlexp.errors import RlexpError
from rlexp.rewards.registry import register
from tests.helpers import compose_cfg, in_eval

pytestmark = pytest.mark.slow

SIGTERM_AT_CALL = {"n": None, "calls": 0}
TASKS = ("chain_sum", "products", "letter_counting")


@register("test_adaptive_sigterm")
def _sigterm_reward():
    def test_adaptive_sigterm(prompts, completions, **_):
        if not in_eval():
            SIGTERM_AT_CALL["calls"] += 1
            if SIGTERM_AT_CALL["calls"] == SIGTERM_AT_CALL["n"]:
                os.kill(os.getpid(), signal.SIGTERM)
        return [0.0] * len(completions)

    return test_adaptive_sigterm


def run(run_dir: Path, overrides: list[str]) -> None:
    """As `python -m rlexp` runs it (rlexp.main: the env resolved, then planned), plus a zero-weight reward that
    sends SIGTERM at a chosen training call."""
    from rlexp.config.load import to_config
    from rlexp.envs import resolve
    from rlexp.train.plan import make_plan
    from rlexp.train.run import train

    cfg = compose_cfg(overrides)
    conf = resolve(to_config(cfg))
    extra = RewardFnConfig(fn="test_adaptive_sigterm", weight=0.0, range=[0.0, 1.0])
    conf = dataclasses.replace(conf, reward=dataclasses.replace(conf.reward, functions=[*conf.reward.functions, extra]))
    train(make_plan(conf, cfg, str(run_dir), lambda: None), conf, cfg)


def steps(run_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "rewards/sum" in r}


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
    full, interrupted = tmp_path / "full", tmp_path / "interrupted"
    SIGTERM_AT_CALL.update(n=None, calls=0)
    run(full, overrides)
    # during step 4's rollout: its rewards were observed (the shares moved), but the forced checkpoint is step 3's
    SIGTERM_AT_CALL.update(n=4, calls=0)
    with pytest.raises(RlexpError, match="interrupted at step 3"):
        run(interrupted, overrides)
    SIGTERM_AT_CALL.update(n=None, calls=0)
    run(interrupted, overrides)
    resumed, reference = steps(interrupted), steps(full)
    assert sorted(resumed) == sorted(reference) == list(range(1, 11))
    names = [f"env/{t}/{k}" for t in TASKS for k in ("weight", "learnable", "reward_mean")]
    # the weights had moved by the checkpoint (step 3): a resume that restored nothing would draw otherwise
    assert reference[4]["env/chain_sum/weight"] < 0.25 < 1 / 3 == pytest.approx(reference[1]["env/chain_sum/weight"])
    for step in range(1, 11):
        for name in ("rewards/sum", "loss", "kl", "completions/mean_length", *names):
            if name in reference[step]:
                assert resumed[step][name] == pytest.approx(reference[step][name], rel=1e-5, abs=1e-7), (step, name)
