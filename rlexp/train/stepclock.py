"""A step's time: its rollout, reference pass and update, without checkpoint saves and mid-run evals.

Tunix's GRPO learner runs each step as a rollout and reference pass (on a worker thread), then the actor's update,
whose `train` call ends when the update has finished (`on_train_end`, after Tunix waits for the device). rlexp's
`perf/step_time_sec` is the time between two such ends. Two things fall between them that are not the step: Tunix
saves a checkpoint right after a `checkpoint_every` update, and the step hook runs a mid-run eval before an update.
Both are set aside and reported on their own, `perf/checkpoint_time_sec` on the step that saved (with, after the
last step, closing the trainer: the final save and waiting for orbax's background writes) and
`perf/eval_time_sec` on the step evaluated. A background write that slows the next step stays in that step.

Before, the step was measured between update starts, so each held the next step's rollout, the last held only its
update plus the final save and write (1.1-1.8 s more than the ~2 s steps of benchmarks/README.md's compute
workload), and a 6-step run's median step moved by 2-3 %. The median step (benchmarks, `cost.calibration`) is now
the step's.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax

CHECKPOINT = "perf/checkpoint_time_sec"
EVAL = "perf/eval_time_sec"
STEP = "perf/step_time_sec"


class StepClock:
    """Laps between step ends, less the time set aside inside each."""

    def __init__(self) -> None:
        self.last_end = time.perf_counter()
        self._aside = 0.0  # seconds to leave out of the current lap
        self._saved = 0.0  # of which, checkpoint saves: reported with the lap
        self._last_saved = 0.0  # the last lap's
        self._closing = 0.0  # closing the trainer, after the last step

    def restart(self) -> None:
        """Start the first lap now (training begins; what came before is not a step)."""
        self.last_end, self._aside, self._saved = time.perf_counter(), 0.0, 0.0

    def set_aside(self, seconds: float) -> None:
        """Leave `seconds` of work done between steps (a mid-run eval) out of the current lap."""
        self._aside += seconds

    def peek(self) -> float:
        """The current lap's step time so far, the lap going on."""
        return time.perf_counter() - self.last_end - self._aside

    def lap(self) -> dict[str, float]:
        """The metrics of the step that just ended; the next lap starts now."""
        now = time.perf_counter()
        metrics = {STEP: now - self.last_end - self._aside}
        if self._saved:
            metrics[CHECKPOINT] = self._saved
        self.last_end, self._aside, self._last_saved, self._saved = now, 0.0, self._saved, 0.0
        return metrics

    def closing(self) -> dict[str, float]:
        """The last step's checkpoint time, closing the trainer included; call once the learner has returned."""
        took = self._last_saved + self._closing
        return {CHECKPOINT: took} if took else {}

    def time_saves(self, manager: Any, every: int) -> None:
        """Wrap Tunix's `CheckpointManager.save` on this instance: a call that saved is set aside as checkpoint time.

        Tunix calls it after every update, whose arrays are still being computed (dispatch is asynchronous), and
        orbax first waits for them: at a step that saves (`every` steps, or forced) the wrapper waits for the
        update before starting the clock, so the update stays in the step. Calls that do not save take
        microseconds and stay in the step too; a preemption save, rare, is timed with its update's tail.
        """
        save = manager.save

        @functools.wraps(save)
        def timed_save(step: int, model: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("force") or step % every == 0:
                from flax import nnx

                jax.block_until_ready(nnx.state(model))
            start = time.perf_counter()
            saved = save(step, model, *args, **kwargs)
            if saved:
                took = time.perf_counter() - start
                self.set_aside(took)
                self._saved += took
            return saved

        manager.save = timed_save

    def time_close(self, cluster: Any) -> None:
        """Wrap `RLCluster.close` on this instance, which Tunix's learner calls after the last step: the final save
        and orbax's pending writes, timed as checkpoint time."""
        close = cluster.close

        @functools.wraps(close)
        def timed_close(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return close(*args, **kwargs)
            finally:
                self._closing = time.perf_counter() - start

        cluster.close = timed_close
