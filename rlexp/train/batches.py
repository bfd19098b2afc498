"""The training data as Tunix takes it: batches of numpy arrays, in a deterministic order.

`batches`: the rows shuffled from the run's seed, epoch after epoch. With `env.adaptive` (rlexp.envs.adaptive)
each batch is drawn instead by the task weights of the moment; the count of batches is the same. `cycle_batches`:
dynamic sampling's refill source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from rlexp.config.schema import RlexpConfig


def arrays(chunk: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """One batch of rows as arrays (Tunix repeats every leaf per generation)."""
    fields = [k for k in chunk[0] if k not in ("prompt", "question")]
    return {
        "prompts": np.array([r["prompt"] for r in chunk]),
        **{k: np.array([str(r[k]) for r in chunk]) for k in fields},
    }


def batches(rows: list[dict[str, Any]], batch_size: int, epochs: int, seed: int, shuffle: bool = True):
    """Deterministic shuffled batches of numpy arrays. `shuffle=False`: the rows' own order every epoch
    (dataset.shuffle=maxtext: grain's order, repeated as MaxText repeats it)."""
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(len(rows)) if shuffle else np.arange(len(rows))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield arrays([rows[j] for j in order[i : i + batch_size]])


def train_batches(conf: RlexpConfig, rows: list[dict[str, Any]], adaptive: Any = None) -> Iterable[dict]:
    """The run's training batches: shuffled by the seed, or drawn by `adaptive`'s weights (as many batches)."""
    t = conf.trainer
    if adaptive is None:
        return batches(rows, t.batch_size, t.epochs, conf.seed, conf.dataset.shuffle != "maxtext")
    count = t.epochs * (len(rows) // t.batch_size)
    return (arrays(chunk) for chunk in adaptive.batches(rows, t.batch_size, count))


def cycle_batches(make: Callable[[int], Iterator[dict]]) -> Callable[[], dict]:
    """A refill source: the next batch of `make(pass)`, starting a new pass when one ends."""
    state = {"pass": 0, "it": make(0)}

    def next_batch() -> dict:
        for _ in range(2):
            try:
                return next(state["it"])
            except StopIteration:
                state["pass"] += 1
                state["it"] = make(state["pass"])
        raise RuntimeError("the refill stream yields no batch")

    return next_batch
