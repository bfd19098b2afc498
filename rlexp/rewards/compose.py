"""Turns a RewardConfig into the reward callables Tunix sums, plus per-step reward statistics.

Tunix adds up the values of every reward function it is given. For `combine: sum` (MaxText)
each configured function becomes one weighted callable (so Tunix also logs it by name). For
`combine: weighted_mean` (Vertex; `weighted_mean_clipped` is its older name) every value is
clipped to [-1, 1] and a single callable returns clip(Σ wᵢ rᵢ / Σ wᵢ, -1, 1). Every call is
recorded in `RewardSet.stats`, which the trainer drains once per step: per reward mean, std,
errors, non-finite values, the share of clipped values, the latency of its calls (mean, p95) and
the RPC-error and invalid ratios (exceptions and non-finite values; a remote reward with its own
`drain_metrics()`, such as the judge, reports its per-request numbers and token usage instead). An exception or a NaN is an errored invocation: the
sample leaves its group (it takes the mean of its group's valid values, so its advantage is 0 and the group's mean
is unchanged; `leave_group`); a call that raised scores its whole batch 0. When more than `max_error_ratio` of a
step's invocations error, `step_metrics()` raises.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlexp.config.schema import RewardConfig
from rlexp.errors import ConfigError, RlexpError
from rlexp.rewards.registry import RewardFn, make_reward_fn

WEIGHTED_MEAN = ("weighted_mean", "weighted_mean_clipped")  # the second: the older name, kept as an alias
COMBINES = ("sum", *WEIGHTED_MEAN)


class RewardErrorBudgetExceeded(RlexpError):
    """More than reward.max_error_ratio of a step's reward invocations errored."""

    exit_code = 1  # a failure at run time, not a usage error


@dataclass
class RewardStats:
    """Per-reward values and error counts since the last `drain()`."""

    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    non_finite: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    out_of_range: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # outside the declared range
    clipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # seconds per call
    raised: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # values of calls that raised
    # per reward, each value since the drain in call order: (value, None), or (None, error text) when errored
    rows: dict[str, list[tuple[float | None, str | None]]] = field(default_factory=lambda: defaultdict(list))
    last_error: dict[str, str] = field(default_factory=dict)  # kept across drains: the newest failure

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
            out[f"rewards/{name}/out_of_range"] = float(self.out_of_range[name])
            out[f"rewards/{name}/clip_ratio"] = self.clipped[name] / self.calls[name] if self.calls[name] else 0.0
            out[f"rewards/{name}/rpc_error_ratio"] = self.raised[name] / self.calls[name] if self.calls[name] else 0.0
            out[f"rewards/{name}/invalid_ratio"] = self.non_finite[name] / self.calls[name] if self.calls[name] else 0.0
            lat = sorted(self.latency[name])
            if lat:
                out[f"rewards/{name}/latency_mean_s"] = sum(lat) / len(lat)
                out[f"rewards/{name}/latency_p95_s"] = lat[min(len(lat) - 1, math.ceil(0.95 * len(lat)) - 1)]
        for counts in (
            self.values,
            self.errors,
            self.non_finite,
            self.out_of_range,
            self.clipped,
            self.calls,
            self.latency,
            self.raised,
            self.rows,
        ):
            counts.clear()
        return out

    def error_ratio(self) -> float:
        calls = sum(self.calls.values())
        return sum(self.errors.values()) / calls if calls else 0.0

    def errored(self, name: str, n: int, text: str) -> None:
        """Count n errored values of reward `name`, each with its error text."""
        self.errors[name] += n
        self.rows[name] += [(None, text)] * n


def _within(v: float, lo: float, hi: float) -> bool:
    slack = 1e-6 * max(1.0, abs(lo), abs(hi))  # float rounding of a weighted or scaled score
    return lo - slack <= v <= hi + slack


def leave_group(values: list[float], group_size: int) -> list[float]:
    """Errored values (NaN) take the mean of the valid values of their group (`group_size` contiguous completions
    of one prompt, as Tunix orders them), or 0 when the group has none: an errored sample then moves neither its
    group's mean nor its own advantage, as if it had been dropped from the group."""
    g = group_size if group_size > 1 and len(values) % group_size == 0 else len(values) or 1
    out = list(values)
    for start in range(0, len(out), g):
        block = out[start : start + g]
        valid = [v for v in block if not math.isnan(v)]
        fill = sum(valid) / len(valid) if valid else 0.0
        out[start : start + g] = [fill if math.isnan(v) else v for v in block]
    return out


def scored(
    name: str,
    fn: RewardFn,
    stats: RewardStats,
    clip: bool = False,
    bounds: tuple[str, float, float] | None = None,
) -> Callable[..., list[float]]:
    """Call fn, never raising: an exception, a non-finite value or one outside `bounds` (the key of the declared
    range, low, high) is an errored invocation, counted in `stats` and returned as NaN; `clip` bounds values to
    [-1, 1]. Training's rewards and the eval's correctness both score through it."""

    def call(prompts: list[str], completions: list[str], **kw: Any) -> list[float]:
        n = len(completions)
        stats.calls[name] += n
        t0 = time.monotonic()
        try:
            raw = list(fn(prompts, completions, **kw))
            if len(raw) != n:
                raise ValueError(f"returned {len(raw)} values for {n} completions")
        except Exception as err:  # noqa: BLE001 - any failure of user reward code is an errored call
            stats.latency[name].append(time.monotonic() - t0)
            stats.raised[name] += n
            stats.last_error[name] = f"{type(err).__name__}: {err}"[:500]
            stats.errored(name, n, stats.last_error[name])
            return [math.nan] * n
        stats.latency[name].append(time.monotonic() - t0)
        item_error = getattr(fn, "last_error", None)
        if item_error:
            stats.last_error[name] = str(item_error)[:500]
            fn.last_error = None  # type: ignore[attr-defined]
        out = []
        for row, v in enumerate(raw):
            # a NaN or None: the reward's own newest error (the judge's, the sandbox's) says why, where it has one
            why = str(item_error)[:500] if item_error else f"row {row}: returned {v!r:.60}"
            try:
                v = float(v) if v is not None else math.nan
            except (TypeError, ValueError):
                why = f"row {row}: returned {type(v).__name__} {v!r:.60} where a number belongs"
                stats.last_error[name] = why
                v = math.nan
            if not math.isfinite(v):
                stats.non_finite[name] += 1
                stats.errored(name, 1, why)
                out.append(math.nan)
                continue
            if bounds is not None and not _within(v, bounds[1], bounds[2]):
                stats.out_of_range[name] += 1
                stats.last_error[name] = (
                    f"row {row}: returned {v:g}, outside {bounds[0]}=[{bounds[1]:g}, {bounds[2]:g}]"
                )
                stats.errored(name, 1, stats.last_error[name])
                out.append(math.nan)
                continue
            if clip and not -1.0 <= v <= 1.0:
                stats.clipped[name] += 1
                v = max(-1.0, min(1.0, v))
            stats.values[name].append(v)
            stats.rows[name].append((v, None))
            out.append(v)
        return out

    call.__name__ = name
    return call


def _guarded(
    name: str,
    fn: RewardFn,
    stats: RewardStats,
    clip: bool = False,
    group_size: int = 1,
    bounds: tuple[str, float, float] | None = None,
) -> Callable[..., list[float]]:
    """`scored`, whose errored values leave their group (`leave_group`; a batch that raised scores 0 everywhere:
    every group equal, no advantage anywhere)."""
    score = scored(name, fn, stats, clip, bounds)

    def call(prompts: list[str], completions: list[str], **kw: Any) -> list[float]:
        return leave_group(score(prompts, completions, **kw), group_size)

    call.__name__ = name
    return call


def declared_range(cfg: RewardConfig, i: int) -> tuple[str, float, float] | None:
    """(key, low, high) of function i's declared range where values outside it are errors: with combine=sum
    (weighted_mean clips each value to [-1, 1] instead, Vertex's documented rule)."""
    f = cfg.functions[i]
    if cfg.combine in WEIGHTED_MEAN or len(f.range) != 2:
        return None
    return f"reward.functions[{i}].range", float(f.range[0]), float(f.range[1])


def check_budget(stats: RewardStats, max_error_ratio: float, what: str = "step's reward calls") -> float:
    """The share of errored values in `stats`; above `max_error_ratio` a RewardErrorBudgetExceeded naming the
    newest failure of each reward."""
    ratio = stats.error_ratio()
    if ratio > max_error_ratio:
        last = "; ".join(f"{k}: {v}" for k, v in sorted(stats.last_error.items()))
        raise RewardErrorBudgetExceeded(
            f"reward.max_error_ratio={max_error_ratio}: {ratio:.0%} of the {what} errored or returned non-finite or "
            "out-of-range values; fix the reward (see samples.jsonl) or raise the limit"
            + (f" (last error: {last})" if last else "")
        )
    return ratio


@dataclass
class NamedReward:
    name: str
    weight: float
    fn: Callable[..., list[float]]  # guarded: never raises, values finite
    raw: RewardFn  # the factory's function (holds pools, sessions, counters)


@dataclass
class RewardSet:
    fns: list[Callable[..., list[float]]]
    stats: RewardStats
    max_error_ratio: float
    rewards: list[NamedReward] = field(default_factory=list)
    combine: str = "sum"

    def step_metrics(self) -> dict[str, float]:
        """Drain the stats of the finished step; raise if too many calls errored."""
        ratio = check_budget(self.stats, self.max_error_ratio)  # the run stops here: nothing to drain
        metrics = self.stats.drain()
        for r in self.rewards:  # a remote reward's own per-request numbers (judge: tokens, latency, ratios)
            own = getattr(r.raw, "drain_metrics", None)
            if callable(own):
                metrics.update({f"rewards/{r.name}/{k}": v for k, v in own().items()})
        metrics["rewards/error_ratio"] = ratio
        return metrics

    def token_totals(self) -> dict[str, dict[str, int]]:
        """Per reward that counts them (the judge), the tokens its endpoint reported over the run."""
        out = {}
        for r in self.rewards:
            totals = getattr(r.raw, "token_totals", None)
            if isinstance(totals, dict):
                out[r.name] = dict(totals)
        return out

    def close(self) -> None:
        """Release what rewards hold (grader processes, HTTP threads)."""
        for r in self.rewards:
            close = getattr(r.raw, "close", None)
            if callable(close):
                close()


def build_rewards(cfg: RewardConfig, group_size: int = 1) -> RewardSet:
    """The reward callables for Tunix; `group_size`: completions per prompt (trainer.num_generations), the groups
    an errored sample leaves."""
    if cfg.combine not in COMBINES:
        raise ConfigError("reward.combine", cfg.combine, "use sum or weighted_mean")
    stats = RewardStats()
    clip = cfg.combine in WEIGHTED_MEAN
    rewards = []
    for i, f in enumerate(cfg.functions):
        raw = make_reward_fn(f.fn, f.kwargs)
        name = f.name or f.fn
        bounds = declared_range(cfg, i)
        rewards.append(NamedReward(name, f.weight, _guarded(name, raw, stats, clip, group_size, bounds), raw))
    if len({r.name for r in rewards}) != len(rewards):
        raise ConfigError("reward.functions", [r.name for r in rewards], "give rewards with the same fn distinct names")
    if not clip:
        fns = []
        for r in rewards:

            def weighted(prompts, completions, _fn=r.fn, _w=r.weight, **kw):  # noqa: ANN001
                return [_w * v for v in _fn(prompts, completions, **kw)]

            weighted.__name__ = r.name  # Tunix logs rewards/<fn name>
            fns.append(weighted)
        return RewardSet(fns, stats, cfg.max_error_ratio, rewards, cfg.combine)
    total_w = sum(r.weight for r in rewards)
    if total_w <= 0:
        raise ConfigError("reward.functions[].weight", [r.weight for r in rewards], "weights must sum to > 0")

    def weighted_mean(prompts, completions, **kw):  # noqa: ANN001
        cols = [[r.weight * v for v in r.fn(prompts, completions, **kw)] for r in rewards]
        return [max(-1.0, min(1.0, sum(vals) / total_w)) for vals in zip(*cols, strict=True)]

    weighted_mean.__name__ = cfg.combine  # Tunix logs the combined reward as rewards/<combine>/mean
    return RewardSet([weighted_mean], stats, cfg.max_error_ratio, rewards, cfg.combine)
