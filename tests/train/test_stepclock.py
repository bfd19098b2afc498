"""StepClock: a lap leaves out what was set aside, and times only the checkpoint manager's calls that saved."""

from __future__ import annotations

import time

import jax.numpy as jnp
from flax import nnx

from rlexp.train.stepclock import CHECKPOINT, STEP, StepClock


class Manager:
    """Tunix's CheckpointManager.save contract: saves when forced or at its interval, says whether it did."""

    def __init__(self, every: int, seconds: float) -> None:
        self.every, self.seconds, self.calls = every, seconds, []

    def save(self, step, model, optimizer=None, save_only_lora_params=False, force=False, custom_metadata=None):
        self.calls.append(step)
        if not force and step % self.every:
            return False
        time.sleep(self.seconds)
        return True


class Model(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones(3))


class Cluster:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def close(self) -> None:
        time.sleep(self.seconds)


def test_a_lap_leaves_out_what_was_set_aside() -> None:
    clock = StepClock()
    clock.restart()
    time.sleep(0.05)
    clock.set_aside(10.0)  # more than the lap: the step time goes negative, which shows the subtraction
    first = clock.lap()
    assert first[STEP] < 0 and CHECKPOINT not in first
    time.sleep(0.05)
    assert 0.05 <= clock.lap()[STEP] < 5.0  # the next lap starts clean


def test_only_saves_that_saved_are_checkpoint_time() -> None:
    clock, manager, model = StepClock(), Manager(every=2, seconds=0.3), Model()
    clock.time_saves(manager, every=2)
    clock.restart()
    assert manager.save(1, model, None) is False
    one = clock.lap()
    assert manager.save(2, model, None, custom_metadata={}) is True
    two = clock.lap()
    assert manager.calls == [1, 2]  # the wrapper passes every call through
    assert CHECKPOINT not in one and one[STEP] < 0.3
    assert two[CHECKPOINT] >= 0.3 and two[STEP] < 0.3
    assert manager.save(3, model, None, force=True) is True  # forced (a stop's save): timed too
    assert clock.lap()[CHECKPOINT] >= 0.3


def test_closing_after_the_last_step_is_its_checkpoint_time() -> None:
    clock, manager, cluster = StepClock(), Manager(every=2, seconds=0.2), Cluster(seconds=0.3)
    clock.time_saves(manager, every=2)
    clock.time_close(cluster)
    clock.restart()
    manager.save(2, Model())
    last = clock.lap()
    cluster.close()
    assert clock.closing()[CHECKPOINT] >= last[CHECKPOINT] + 0.3
    assert StepClock().closing() == {}  # nothing saved, nothing closed: no metric
