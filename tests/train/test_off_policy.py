"""The queue of batches sampled ahead (rlexp.train.off_policy) against a stand-in learner: each batch is sampled
with exactly the weights of step max(s, t - 1 - k), colocated and in a thread; the staleness metrics say so; a
checkpoint's queue resumes the same schedule; a sampler's error reaches the learner's thread. No JAX."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rlexp.errors import RunError
from rlexp.train.off_policy import (
    ROLLOUT_WAIT,
    STALENESS_MAX,
    STALENESS_MEAN,
    TRAINER_WAIT,
    OffPolicyQueue,
    Sampler,
    queue_path,
)
from rlexp.tunix.ahead import Sampled

ROWS = 4  # prompts x generations of a step


def prompts(step: int) -> list[str]:
    return [f"s{step}-{i}" for i in range(ROWS)]


class Learner(Sampler):
    """Weights are version numbers: the trainer's after `trained` updates; the engine's what was installed (colocated:
    the trainer's own, shared). Each sample records the weights it saw."""

    def __init__(self, colocated: bool, fail_at: int | None = None, sample_s: float = 0.0) -> None:
        self.trained = 0
        self.engine: int | None = None
        self.colocated, self.fail_at, self.sample_s = colocated, fail_at, sample_s
        self.sampled_with: dict[int, int] = {}
        self.installs: list[int] = []

    def sample(self, step: int) -> Sampled:
        if step == self.fail_at:
            raise ValueError(f"reward broke at {step}")
        time.sleep(self.sample_s)
        weights = self.trained if self.colocated else self.engine
        assert weights is not None
        self.sampled_with[step] = weights
        return Sampled({"weights": weights}, prompts(step), (None, None), [({"m": (step, None)}, "train")])

    def install(self, staged: int) -> None:
        self.engine = staged
        self.installs.append(staged)

    def stage(self) -> int:
        return self.trained


def run(
    queue: OffPolicyQueue,
    learner: Learner,
    steps: range,
    update_s: float = 0.0,
    halves: bool = False,
    close: bool = True,
) -> list:
    """Tunix's loop in short: each step takes its batch (in two halves: micro-batches), updates, syncs weights."""
    trained_on = []
    for step in steps:
        rows = prompts(step)
        parts = [rows[: ROWS // 2], rows[ROWS // 2 :]] if halves else [rows]
        for part in parts:
            batch, offset = queue.take(part)
            assert batch.prompts[offset : offset + len(part)] == part
        trained_on.append((step, batch.version))
        time.sleep(update_s)
        learner.trained = step
        if queue.concurrent:
            queue.push(step, learner.stage)
    if close:
        queue.close()
    return trained_on


class Pipelined(Learner):
    """A pass in three parts, as Tunix's: generation (inside the queue's turn: weights, seed), then scoring (inside
    its scoring turn). Records the order of each part and whether two ever overlapped."""

    def __init__(self, generate_s: float, score_s: float, fail_at: int | None = None) -> None:
        super().__init__(colocated=False, fail_at=fail_at)
        self.generate_s, self.score_s = generate_s, score_s
        self.queue: OffPolicyQueue | None = None
        self.generated: list[int] = []
        self.scored: list[int] = []
        self.seeds: dict[int, int] = {}
        self.busy = {"generate": 0, "score": 0}
        self.overlapped: list[str] = []
        self.lock = threading.Lock()
        self.seed_set = 0

    def prepare(self, step: int) -> int:
        return step * 10  # the step's rows

    def seed(self, step: int) -> None:
        self.seed_set = step

    def _inside(self, part: str, seconds: float) -> None:
        with self.lock:
            self.busy[part] += 1
            if self.busy[part] > 1:
                self.overlapped.append(part)
        time.sleep(seconds)
        with self.lock:
            self.busy[part] -= 1

    def sample_prepared(self, step: int, prepared: int) -> Sampled:
        assert prepared == step * 10 and self.queue is not None
        with self.queue.generation():
            self.generated.append(step)
            self.seeds[step] = self.seed_set
            weights = self.engine
            self._inside("generate", self.generate_s)
        assert weights is not None
        self.sampled_with[step] = weights
        with self.queue.scored():
            if step == self.fail_at:
                raise ValueError(f"reward broke at {step}")
            self.scored.append(step)
            self._inside("score", self.score_s)
        return Sampled({"weights": weights}, prompts(step), (None, None), [({"m": (step, None)}, "train")])


def make(
    k: int, learner: Learner, last: int, start: int = 0, run_dir: Path | None = None, pipelined: bool = False
) -> tuple:
    metrics: dict[int, dict] = {}
    samples: list[str] = []
    queue = OffPolicyQueue(
        k,
        learner,
        start_step=start,
        last_step=last,
        concurrent=not learner.colocated,
        on_metrics=lambda step, m: metrics.setdefault(step, {}).update(m),
        write_samples=samples.extend,
        run_dir=None if run_dir is None else str(run_dir),
        pipelined=pipelined,
    )
    if isinstance(learner, Pipelined):
        learner.queue = queue
    return queue, metrics


@pytest.mark.parametrize("colocated", [True, False], ids=["colocated", "concurrent"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_each_batch_samples_with_the_weights_of_step_t_minus_1_minus_k(colocated: bool, k: int) -> None:
    learner = Learner(colocated, sample_s=0.002)
    queue, metrics = make(k, learner, last=9)
    trained_on = run(queue, learner, range(1, 10), update_s=0.001, halves=True)
    expected = {step: max(0, step - 1 - k) for step in range(1, 10)}
    assert learner.sampled_with == expected
    assert trained_on == sorted(expected.items())
    for step, row in metrics.items():
        assert row[STALENESS_MEAN] == row[STALENESS_MAX] == step - 1 - expected[step] <= k
        assert row[TRAINER_WAIT] >= 0 and row[ROLLOUT_WAIT] >= 0
    assert sorted(metrics) == list(range(1, 10))
    if not colocated:  # versions installed in order, each once; the thread never sampled with a newer one
        assert learner.installs[1:] == sorted(set(learner.installs[1:]))


def test_the_thread_samples_while_the_trainer_updates() -> None:
    """Rollout and update each 40 ms: with k=1 a step costs about one of them, not both."""
    learner = Learner(colocated=False, sample_s=0.04)
    queue, _ = make(1, learner, last=10)
    began = time.perf_counter()
    run(queue, learner, range(1, 11), update_s=0.04)
    took = time.perf_counter() - began
    assert took < 0.7, took  # in turn: 0.8 s; overlapped: ~0.44 s


def test_a_checkpoint_queue_resumes_the_same_schedule(tmp_path: Path) -> None:
    learner = Learner(colocated=True)
    full, _ = make(2, learner, last=8, run_dir=tmp_path / "a")
    uninterrupted = run(full, learner, range(1, 9))

    first = Learner(colocated=True)
    queue, _ = make(2, first, last=8, run_dir=tmp_path / "b")
    run(queue, first, range(1, 5))
    queue.store(4, to_host=lambda x: x)  # the checkpoint of step 4 holds the batches of 5 and 6
    assert Path(queue_path(str(tmp_path / "b"), 4)).is_file()

    second = Learner(colocated=True)
    second.trained = 4
    resumed, _ = make(2, second, last=8, start=4, run_dir=tmp_path / "b")
    resumed.restore(4, to_device=lambda x: x)
    assert run(resumed, second, range(5, 9)) == uninterrupted[4:]
    assert {s: w for s, w in {**first.sampled_with, **second.sampled_with}.items()} == learner.sampled_with
    assert sorted(second.sampled_with) == [7, 8]  # 5 and 6 came from the checkpoint


def test_pipelined_threads_resume_after_the_restored_batches(tmp_path: Path) -> None:
    """A resumed run's queue holds the batches its checkpoint stored: the two threads' turns start after them."""
    first = Pipelined(generate_s=0.001, score_s=0.001)
    queue, _ = make(2, first, last=8, run_dir=tmp_path, pipelined=True)
    run(queue, first, range(1, 5), close=False)
    queue.store(4, to_host=lambda x: x)  # as a checkpoint saves it: while the threads sample on
    queue.close()
    second = Pipelined(generate_s=0.001, score_s=0.001)
    second.trained = 4
    resumed, _ = make(2, second, last=8, start=4, run_dir=tmp_path, pipelined=True)
    resumed.restore(4, to_device=lambda x: x)
    done = threading.Thread(target=run, args=(resumed, second, range(5, 9)), daemon=True)
    done.start()
    done.join(timeout=10)
    assert not done.is_alive(), "the resumed threads wait for turns that never come"
    assert second.generated == second.scored == [7, 8]  # 5 and 6 came from the checkpoint
    assert {**first.sampled_with, **second.sampled_with} == {s: max(0, s - 3) for s in range(1, 9)}


def test_a_resume_without_the_queue_file_is_one_line(tmp_path: Path) -> None:
    queue, _ = make(1, Learner(colocated=True), last=8, start=4, run_dir=tmp_path)
    with pytest.raises(RunError, match=r"off_policy/4.pkl: missing.*move checkpoints/actor/4 aside"):
        queue.restore(4, to_device=lambda x: x)


def test_a_concurrent_store_waits_for_the_batches_it_needs(tmp_path: Path) -> None:
    learner = Learner(colocated=False, sample_s=0.02)
    queue, _ = make(3, learner, last=10, run_dir=tmp_path)
    queue.take(prompts(1))
    learner.trained = 1
    queue.store(1, to_host=lambda x: x)  # needs 2, 3, 4: sampled with version 0, maybe not yet
    import pickle

    stored = pickle.loads(Path(queue_path(str(tmp_path), 1)).read_bytes())
    assert [(b.step, b.version) for b in stored] == [(2, 0), (3, 0), (4, 0)]
    queue.close()


def test_a_sampler_error_reaches_the_learner(tmp_path: Path) -> None:
    for colocated in (True, False):
        learner = Learner(colocated, fail_at=3)
        queue, _ = make(1, learner, last=6)
        with pytest.raises(ValueError, match="reward broke at 3"):
            run(queue, learner, range(1, 7))
        queue.close()


def test_other_prompts_than_the_data_order_are_refused() -> None:
    queue, _ = make(1, Learner(colocated=True), last=4)
    with pytest.raises(RunError, match="step 1: the batch sampled ahead holds other prompts"):
        queue.take(["not", "these"])


def test_close_stops_a_thread_waiting_for_weights() -> None:
    learner = Learner(colocated=False)
    queue, _ = make(1, learner, last=50)
    queue.take(prompts(1))  # the thread samples 2 with version 0, then waits for version 1
    time.sleep(0.05)
    closer = threading.Thread(target=queue.close)
    closer.start()
    closer.join(timeout=5)
    assert not closer.is_alive() and not any(thread.is_alive() for thread in queue.threads)
    assert learner.installs[-1] == learner.trained  # the engine ends with the trainer's weights (eval after)


@pytest.mark.parametrize("k", [1, 2])
def test_pipelined_threads_sample_what_one_thread_samples_one_part_at_a_time_in_step_order(k: int) -> None:
    one = Learner(colocated=False, sample_s=0.004)
    queue, _ = make(k, one, last=12)
    run(queue, one, range(1, 13), update_s=0.002)
    two = Pipelined(generate_s=0.002, score_s=0.004)
    queue, metrics = make(k, two, last=12, pipelined=True)
    assert len(queue.threads) == 0 and queue.pipelined
    trained_on = run(queue, two, range(1, 13), update_s=0.002)
    assert two.sampled_with == one.sampled_with == {s: max(0, s - 1 - k) for s in range(1, 13)}
    assert trained_on == sorted(one.sampled_with.items())
    assert two.generated == two.scored == list(range(1, 13)) and two.seeds == {s: s for s in range(1, 13)}
    assert not two.overlapped, two.overlapped  # the engine and the reward functions: one batch at a time
    assert two.installs[1:] == sorted(set(two.installs[1:]))
    assert all(row[STALENESS_MAX] <= k for row in metrics.values())


def test_pipelined_scoring_overlaps_the_next_generation() -> None:
    """A slow scorer (a judge, a reward service): two threads wait for max(generation, scoring) a step, not their
    sum. Timed side by side against one thread, on sleeps (no CPU): a ratio, not a wall-clock limit."""
    seconds = {}
    for pipelined in (False, True):
        learner = Pipelined(generate_s=0.03, score_s=0.05)
        if not pipelined:  # one thread: the whole pass at once, as Tunix's own pass runs
            learner.sample = lambda step, learner=learner: learner.sample_prepared(step, step * 10)  # type: ignore[method-assign]
            learner.prepare = Sampler.prepare.__get__(learner)  # type: ignore[method-assign]
        queue, _ = make(2, learner, last=16, pipelined=pipelined)
        began = time.perf_counter()
        run(queue, learner, range(1, 17))
        seconds[pipelined] = time.perf_counter() - began
        assert learner.generated == learner.scored == list(range(1, 17))
    assert seconds[True] <= 0.8 * seconds[False], seconds  # 16 x 0.05 s against 16 x 0.08 s, ideally 0.63


def test_a_pipelined_scorers_error_reaches_the_learner_and_stops_both_threads() -> None:
    learner = Pipelined(generate_s=0.001, score_s=0.002, fail_at=4)
    queue, _ = make(2, learner, last=20, pipelined=True)
    with pytest.raises(ValueError, match="reward broke at 4"):
        run(queue, learner, range(1, 21))
    queue.close()
    assert not any(thread.is_alive() for thread in queue.threads)
