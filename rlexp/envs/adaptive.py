"""Adaptive task weights (`env.adaptive`, off by default): a mixed run's sampling weights move toward the tasks
whose groups are still learnable.

A group (one prompt's `num_generations` completions) teaches GRPO something only when its rewards differ: a
group all right or all wrong has zero advantages. prime-rl's online difficulty filtering drops such groups after
sampling; here the sampling itself moves, per task. Each step, per task, the share of its groups whose rewards
differ (`env/<task>/learnable`) updates that task's running share, `s ← (1 - rate)·s + rate·share` (a task
absent from the step keeps its own; every share starts at 1, so step 1 draws by the configured weights). The
weights (`env/<task>/weight`, those that drew the step's batch) are the configured weights b times the running
shares, normalised, each task kept at `floor` at least:

    w_t = floor + (1 - tasks·floor) · b_t·s_t / Σ_u b_u·s_u        (b_t itself when every s_u is 0)

Batch k is a function of the seed, k and the weights alone: how many of its prompts each task gets (a
multinomial draw over the weights) and which of that task's train rows (no repeats inside a batch while the task
has enough rows). The run's state is therefore the running shares: a checkpoint carries those after its step
(`rlexp_adaptive` in its custom metadata) and a resumed run draws the batches after it as the uninterrupted run
did (Tunix's fast-forward redraws the batches before it and drops them). Training is synchronous here: batch k
is drawn once step k's rewards are in, so the weights that draw it are those after step k.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from rlexp.config.schema import AdaptiveConfig
from rlexp.errors import ConfigError

STATE_KEY = "rlexp_adaptive"  # the checkpoint's custom metadata key
KEEP = 16  # steps of state kept: a save (a forced one, after SIGTERM) asks for a step just before the latest


def check(adaptive: AdaptiveConfig, tasks: Sequence[str], num_generations: int) -> None:
    """The keys' rules, when enabled: rates and floors in range, groups to measure."""
    if not adaptive.enabled:
        return
    if not 0 < adaptive.rate <= 1:
        raise ConfigError("env.adaptive.rate", adaptive.rate, "use a share in (0, 1]")
    if adaptive.floor < 0 or adaptive.floor * len(tasks) >= 1:
        raise ConfigError(
            "env.adaptive.floor", adaptive.floor, f"use a weight >= 0 with floor x {len(tasks)} tasks < 1"
        )
    if len(tasks) < 2:
        raise ConfigError("env.adaptive.enabled", True, "needs two or more env.tasks to move weights between")
    if num_generations < 2:
        raise ConfigError(
            "env.adaptive.enabled", True, "measures groups: needs trainer.num_generations >= 2 (GRPO-family)"
        )


def learnable_shares(tasks: Sequence[Any], rewards: Sequence[float], group: int) -> dict[str, float]:
    """Per task: the share of its groups (`group` consecutive samples of one prompt) whose rewards differ."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    values = np.asarray(rewards, dtype=np.float64)
    for start in range(0, len(values) - group + 1, group):
        chunk = values[start : start + group]
        finite = chunk[np.isfinite(chunk)]
        c = counts[str(tasks[start])]
        c[0] += bool(finite.size > 1 and finite.max() > finite.min())
        c[1] += 1
    return {t: live / total for t, (live, total) in sorted(counts.items())}


class AdaptiveWeights:
    """The running shares and the weights they give; draws the training batches."""

    def __init__(self, adaptive: AdaptiveConfig, base: dict[str, float], seed: int) -> None:
        whole = sum(base.values())
        self.base = {t: w / whole for t, w in base.items()}
        self.rate, self.floor, self.seed = adaptive.rate, adaptive.floor, seed
        self.shares = dict.fromkeys(self.base, 1.0)
        self.after: dict[int, dict[str, float]] = {0: dict(self.shares)}  # step -> shares once it was observed
        self.drawn: dict[int, dict[str, float]] = {}  # batch index -> the weights that drew it

    def weights(self) -> dict[str, float]:
        raw = {t: b * self.shares[t] for t, b in self.base.items()}
        whole = sum(raw.values())
        p = {t: v / whole for t, v in raw.items()} if whole > 0 else dict(self.base)
        spare = 1.0 - self.floor * len(p)
        return {t: self.floor + spare * v for t, v in p.items()}

    def observe(self, step: int, tasks: Sequence[Any], rewards: Sequence[float], group: int) -> dict[str, float]:
        """Step `step`'s rewards: its metrics (the weights that drew its batch, each task's learnable share), and
        the running shares moved."""
        used = self.drawn.get(step - 1) or self.weights()
        measured = learnable_shares(tasks, rewards, group)
        out = {f"env/{t}/weight": w for t, w in used.items()}
        out.update({f"env/{t}/learnable": s for t, s in measured.items() if t in self.shares})
        for t, s in measured.items():
            if t in self.shares:
                self.shares[t] = (1.0 - self.rate) * self.shares[t] + self.rate * s
        self.after[step] = dict(self.shares)
        for old in [s for s in self.after if s < step - KEEP] + [k for k in self.drawn if k < step - KEEP]:
            self.after.pop(old, None), self.drawn.pop(old, None)
        return out

    def state(self, step: int) -> dict[str, Any] | None:
        """What a checkpoint of `step` carries; None when that step was not observed here."""
        shares = self.after.get(step)
        return None if shares is None else {"step": step, "shares": shares}

    def restore(self, state: dict[str, Any]) -> None:
        """The running shares a checkpoint carried (exact: JSON keeps a float's every bit)."""
        shares = {str(t): float(s) for t, s in state["shares"].items()}
        if set(shares) != set(self.shares):
            raise ConfigError("env.tasks", sorted(self.shares), f"the checkpoint's tasks are {sorted(shares)}")
        self.shares = shares
        self.after[int(state["step"])] = dict(shares)

    def batches(self, rows: list[dict[str, Any]], batch_size: int, count: int) -> Iterator[list[dict[str, Any]]]:
        """`count` batches of rows, each drawn by the weights of the moment it is asked for."""
        pools: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            pools[str(row["task"])].append(row)
        for k in range(count):
            weights = self.weights()
            self.drawn[k] = weights
            yield draw(pools, weights, batch_size, self.seed, k)


def draw(
    pools: dict[str, list[dict[str, Any]]], weights: dict[str, float], batch_size: int, seed: int, index: int
) -> list[dict[str, Any]]:
    """Batch `index`: prompts per task by a multinomial draw over the weights (tasks without rows left out), then
    that many of the task's rows, in a shuffled order."""
    rng = np.random.default_rng([seed, 104_729, index])
    tasks = [t for t in sorted(weights) if pools.get(t)]
    p = np.array([weights[t] for t in tasks], dtype=np.float64)
    counts = rng.multinomial(batch_size, p / p.sum())
    chunk = []
    for task, n in zip(tasks, counts, strict=True):
        pool = pools[task]
        picks = rng.choice(len(pool), size=int(n), replace=int(n) > len(pool))
        chunk.extend(pool[int(i)] for i in picks)
    return [chunk[int(i)] for i in rng.permutation(len(chunk))]
