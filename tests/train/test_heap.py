"""The garbage collector around a training session: paused and frozen for set-up, collecting during training,
everything handed back when the session ends, completed or stopped."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path

import pytest

from rlexp.errors import RunError
from rlexp.rewards.registry import register
from rlexp.train import heap
from tests.helpers import SHORT, compose_cfg, in_eval

SEEN: list[tuple[bool, int]] = []  # (collector enabled, frozen objects) at each reward call, i.e. each step
FAIL_AT = {"call": None}


@register("test_heap_probe")
def _probe():
    def test_heap_probe(prompts, completions, **_):
        if in_eval():
            return [0.0] * len(completions)
        SEEN.append((gc.isenabled(), gc.get_freeze_count()))
        if FAIL_AT["call"] is not None and len(SEEN) == FAIL_AT["call"]:
            os.kill(os.getpid(), signal.SIGTERM)  # as an eviction delivers it: the run stops with an error
        return [0.0] * len(completions)

    return test_heap_probe


@pytest.fixture(autouse=True)
def collector_as_found():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable() if enabled else gc.disable()


def test_pause_settle_resume_release() -> None:
    gc.enable()
    assert heap.pause() is True
    assert not gc.isenabled() and gc.get_freeze_count() > 0
    made = [[] for _ in range(1000)]
    before = gc.get_freeze_count()
    heap.settle()
    assert gc.get_freeze_count() >= before + len(made)
    heap.resume(True)
    assert gc.isenabled()
    heap.release(True)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    enabled = heap.pause()
    heap.resume(enabled)
    assert not gc.isenabled()
    heap.release(enabled)
    assert not gc.isenabled() and gc.get_freeze_count() == 0


def _run(tmp_path: Path) -> float:
    from rlexp.config.load import to_config
    from rlexp.train.run import train

    rewards = (
        "reward.functions=[{fn: arith_correct}, {fn: arith_format, weight: 0.1}, {fn: test_heap_probe, weight: 0.0}]"
    )
    cfg = compose_cfg([*SHORT, "trainer.max_steps=4", "trainer.checkpoint_every=4", rewards])
    from rlexp.train.plan import make_plan

    conf = to_config(cfg)
    return train(make_plan(conf, cfg, str(tmp_path), lambda: None), conf, cfg)


@pytest.mark.slow
def test_training_collects_over_a_frozen_set_up_and_hands_the_heap_back(tmp_path: Path) -> None:
    gc.enable()
    SEEN.clear()
    FAIL_AT["call"] = None
    _run(tmp_path / "ok")
    assert len(SEEN) == 4  # one reward call per step
    # jax, Tunix, the models and the cluster frozen: far more objects than the test process held before
    assert all(enabled for enabled, _ in SEEN) and min(frozen for _, frozen in SEEN) > 100_000, SEEN
    assert gc.isenabled() and gc.get_freeze_count() == 0

    SEEN.clear()
    FAIL_AT["call"] = 2
    with pytest.raises(RunError, match="interrupted at step"):
        _run(tmp_path / "failed")
    assert gc.isenabled() and gc.get_freeze_count() == 0
