"""Turns a RewardConfig into the reward callables Tunix sums, plus per-step reward statistics.

Tunix adds up the values of every reward function it is given. For `combine: sum` each
configured function becomes one weighted callable (so Tunix also logs it by name). For
`combine: weighted_mean_clipped` a single callable returns clip(Σ wᵢ rᵢ / Σ wᵢ, -1, 1).
Every call is recorded in `RewardSet.stats`, which the trainer drains once per step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlexp.config.schema import RewardConfig
from rlexp.errors import RlexpError
from rlexp.rewards.registry import RewardFn, make_reward_fn


class RewardErrorBudgetExceeded(RlexpError):
    """More than reward.max_error_ratio of a step's reward invocations errored."""


@dataclass
class RewardStats:
    """Per-reward values and error counts since the last `drain()`."""

    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    non_finite: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def drain(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in sorted(self.calls):
            vals = self.values[name]
            if vals:
                mean = sum(vals) / len(vals)
                out[f"rewards/{name}/mean"] = mean
                out[f"rewards/{name}/std"] = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
            out[f"rewards/{name}/errors"] = float(self.errors[name])
            out[f"rewards/{name}/non_finite"] = float(self.non_finite[name])
        self.values.clear(), self.errors.clear(), self.non_finite.clear(), self.calls.clear()
        return out

    def error_ratio(self) -> float:
        calls = sum(self.calls.values())
        return (sum(self.errors.values()) + sum(self.non_finite.values())) / calls if calls else 0.0


def _guarded(name: str, fn: RewardFn, stats: RewardStats) -> Callable[..., list[float]]:
    """Call fn; an exception or a NaN counts as an errored invocation scored 0."""

    def call(prompts: list[str], completions: list[str], **kw: Any) -> list[float]:
        n = len(completions)
        stats.calls[name] += n
        try:
            raw = list(fn(prompts, completions, **kw))
            if len(raw) != n:
                raise ValueError(f"returned {len(raw)} values for {n} completions")
        except Exception:  # noqa: BLE001 - any failure of user reward code is an errored call
            stats.errors[name] += n
            return [0.0] * n
        out = []
        for v in raw:
            v = float(v) if v is not None else math.nan
            if not math.isfinite(v):
                stats.non_finite[name] += 1
                v = 0.0
            stats.values[name].append(v)
            out.append(v)
        return out

    return call


@dataclass
class RewardSet:
    fns: list[Callable[..., list[float]]]
    stats: RewardStats
    max_error_ratio: float

    def step_metrics(self) -> dict[str, float]:
        """Drain the stats of the finished step; raise if too many calls errored."""
        ratio = self.stats.error_ratio()
        metrics = self.stats.drain()
        metrics["rewards/error_ratio"] = ratio
        if ratio > self.max_error_ratio:
            raise RewardErrorBudgetExceeded(
                f"reward.max_error_ratio={self.max_error_ratio}: {ratio:.0%} of the step's reward calls "
                "errored or returned non-finite values; fix the reward (see samples.jsonl) or raise the limit"
            )
        return metrics


def build_rewards(cfg: RewardConfig) -> RewardSet:
    stats = RewardStats()
    named = [
        (f.name or f.fn, f.weight, _guarded(f.name or f.fn, make_reward_fn(f.fn, f.kwargs), stats))
        for f in cfg.functions
    ]
    if cfg.combine == "sum":
        fns = []
        for name, weight, fn in named:

            def weighted(prompts, completions, _fn=fn, _w=weight, **kw):  # noqa: ANN001
                return [_w * v for v in _fn(prompts, completions, **kw)]

            weighted.__name__ = name  # Tunix logs rewards/<fn name>
            fns.append(weighted)
        return RewardSet(fns, stats, cfg.max_error_ratio)
    total_w = sum(w for _, w, _ in named)

    def weighted_mean_clipped(prompts, completions, **kw):  # noqa: ANN001
        cols = [[w * v for v in fn(prompts, completions, **kw)] for _, w, fn in named]
        return [max(-1.0, min(1.0, sum(vals) / total_w)) for vals in zip(*cols, strict=True)]

    return RewardSet([weighted_mean_clipped], stats, cfg.max_error_ratio)
