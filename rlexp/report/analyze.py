"""Numbers a report shows: final / best / last-10 % per metric, seed groups as mean ± std, health flags.

Health flags look for the usual ways a GRPO run "wins" dishonestly or falls over: completions
collapsing or running into the length cap, KL blowing up, groups with no reward variance (no
signal), rewards pinned at a clip bound, reward functions erroring, a format or judge reward climbing
while the correctness reward does not, and train reward rising while eval pass@1 falls.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from rlexp.report.load import Run, Sweep

REWARD = "rewards/sum"
PASS1 = "eval/pass_at_1"
KL = "kl"
LENGTH = "completions/mean_length"
CURVES = (REWARD, PASS1, KL, LENGTH)
# Columns of the table: (metric, statistic); the objective column comes first.
COLUMNS = (
    (PASS1, "final"),
    (PASS1, "best"),
    (REWARD, "final"),
    (REWARD, "last10"),
    (KL, "last10"),
    (LENGTH, "last10"),
)
LOWER_IS_BETTER = {KL, "loss"}
SEED_KEYS = ("seed", "trainer.seed")
# The combined reward of `combine: weighted_mean` (rlexp.rewards.compose.WEIGHTED_MEAN), logged beside its parts.
COMBINED = ("weighted_mean", "weighted_mean_clipped")
REWARD_HEALTH = ("rpc_error_ratio", "invalid_ratio", "latency_p95_s")  # per reward, shown as their peaks
MAX_REWARD_CHARTS = 4


@dataclass
class Flag:
    severity: str  # warn | bad
    code: str
    message: str


@dataclass
class Row:
    """One table row: a point of the swept space, possibly several seeds."""

    params: dict[str, str]
    runs: list[Run]
    values: dict[str, list[float]] = field(default_factory=dict)  # column -> one value per run
    flags: list[Flag] = field(default_factory=list)


def _finite(xs: list[float]) -> list[float]:
    return [x for x in xs if x is not None and math.isfinite(x)]


def stat(run: Run, metric: str, how: str) -> float | None:
    values = [v for _, v in run.series(metric)]
    values = _finite(values)
    if not values:
        return None
    if how == "final":
        return values[-1]
    if how == "best":
        return min(values) if metric in LOWER_IS_BETTER else max(values)
    if how == "last10":
        tail = values[-max(1, math.ceil(len(values) * 0.1)) :]
        return sum(tail) / len(tail)
    raise ValueError(how)


def mean_std(xs: list[float]) -> tuple[float | None, float | None]:
    xs = _finite(xs)
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def _window(values: list[float], first: bool) -> float | None:
    values = _finite(values)
    if not values:
        return None
    n = max(1, math.ceil(len(values) * 0.1))
    part = values[:n] if first else values[-n:]
    return sum(part) / len(part)


def length_cap(run: Run) -> float | None:
    cap = (run.config.get("trainer") or {}).get("max_completion_tokens")
    return float(cap) if isinstance(cap, int | float) else None


def health(run: Run) -> list[Flag]:
    """Reward-hacking and instability signs in one run's metrics."""
    flags: list[Flag] = []
    if run.state == "failed":
        flags.append(Flag("bad", "failed", f"run ended as {run.summary.get('status', 'failed')}"))
    lengths = [v for _, v in run.series(LENGTH)]
    start, end = _window(lengths, True), _window(lengths, False)
    cap = length_cap(run)
    if start and end is not None and len(lengths) >= 5 and end < 0.4 * start:
        flags.append(Flag("warn", "length_collapse", f"completion length collapsed {start:.3g} → {end:.3g} tokens"))
    if cap and end is not None and end >= 0.95 * cap:
        flags.append(Flag("warn", "length_cap", f"completions run into the cap ({end:.3g} of {cap:g} tokens)"))
    elif start and end is not None and len(lengths) >= 5 and end > 3 * start:
        flags.append(Flag("warn", "length_drift", f"completion length grew {start:.3g} → {end:.3g} tokens"))
    kls = [v for _, v in run.series(KL)]
    finite_kl = _finite(kls)
    if len(finite_kl) < len(kls):
        flags.append(Flag("bad", "kl_nan", "KL became NaN/inf"))
    elif len(finite_kl) >= 5:
        base = statistics.median(finite_kl[: max(3, len(finite_kl) // 2)])
        peak = max(finite_kl)
        if peak > max(1.0, 20 * abs(base)):
            flags.append(Flag("bad", "kl_blowup", f"KL blew up: peak {peak:.3g} vs early median {base:.3g}"))
    losses = [v for _, v in run.series("loss")]
    if len(_finite(losses)) < len(losses):
        flags.append(Flag("bad", "loss_nan", "loss became NaN/inf"))
    zero = _window([v for _, v in run.series("frac_reward_zero_std")], False)
    if zero is not None and zero >= 0.8:
        flags.append(Flag("warn", "zero_variance", f"{zero:.0%} of groups have identical rewards (no signal)"))
    for name in sorted(run.metric_names()):
        if name.startswith("rewards/") and "clip" in name:
            clipped = _window([v for _, v in run.series(name)], False)
            if clipped is not None and clipped >= 0.2:
                flags.append(Flag("warn", "reward_clipping", f"{name} = {clipped:.0%} over the last 10 %"))
    errors = _finite([v for _, v in run.series("rewards/error_ratio")])
    bad_calls = [
        n for n in run.metric_names() if n.endswith("/errors")
    ]  # every errored value, non-finite ones included
    per_fn = sum(_finite([v for n in bad_calls for _, v in run.series(n)]))
    if errors and max(errors) > 0:
        sev = "bad" if max(errors) >= 0.1 else "warn"
        flags.append(Flag(sev, "reward_errors", f"reward functions errored (peak error ratio {max(errors):.0%})"))
    elif per_fn > 0:
        flags.append(Flag("warn", "reward_errors", f"{per_fn:g} reward calls errored"))
    for name in sorted(run.metric_names()):  # a remote reward (judge): transport failures vs unparsable answers
        if name.startswith("rewards/") and name.endswith(("/rpc_error_ratio", "/invalid_ratio")):
            peak = max(_finite([v for _, v in run.series(name)]), default=0.0)
            if peak >= 0.1:
                flags.append(Flag("warn", "reward_" + name.rsplit("/", 1)[1], f"{name} peaked at {peak:.0%}"))
    flags += _divergence(run)
    return flags


def reward_names(run: Run) -> list[str]:
    """The rewards of a composite (two or more `rewards/<name>/mean` series), then its combined reward; [] else."""
    names = sorted(
        n.split("/")[1]
        for n in run.metric_names()
        if n.startswith("rewards/") and n.endswith("/mean") and n.count("/") == 2 and _finite(_values(run, n))
    )
    parts = [n for n in names if n not in COMBINED]
    return parts + [n for n in names if n in COMBINED] if len(parts) >= 2 else []


def reward_health(run: Run, name: str) -> dict[str, float]:
    """Peaks of a reward's logged RPC-error and invalid ratios and p95 latency (those it logged)."""
    out = {}
    for key in REWARD_HEALTH:
        values = _finite(_values(run, f"rewards/{name}/{key}"))
        if values:
            out[key] = max(values)
    return out


def reward_chart_runs(sweep: Sweep, ranked: list[Row]) -> list[Run]:
    """Runs whose rewards get a chart of their own: every composite run when there are a few, else the
    top-ranked one and the flagged ones, at most MAX_REWARD_CHARTS."""
    order = [run for row in ranked for run in row.runs]
    composite = [run for run in order if reward_names(run)]
    if len(composite) <= MAX_REWARD_CHARTS:
        return composite
    picked = composite[:1]
    for run in composite[1:]:
        if len(picked) == MAX_REWARD_CHARTS:
            break
        if health(run):
            picked.append(run)
    return picked


def _values(run: Run, metric: str) -> list[float]:
    return [v for _, v in run.series(metric)]


def _trend(run: Run, metric: str) -> float | None:
    values = [v for _, v in run.series(metric)]
    a, b = _window(values, True), _window(values, False)
    return None if a is None or b is None or len(values) < 4 else b - a


def _divergence(run: Run) -> list[Flag]:
    flags = []
    names = {n.split("/")[1] for n in run.metric_names() if n.startswith("rewards/") and n.endswith("/mean")}
    soft = [n for n in names if any(w in n for w in ("format", "layout", "judge"))]  # gameable rewards
    correct = [n for n in names if n not in soft and any(w in n for w in ("correct", "accura", "math", "answer"))]
    for f in soft:
        code = "judge_vs_correct" if "judge" in f else "format_vs_correct"
        for c in correct:
            df, dc = _trend(run, f"rewards/{f}/mean"), _trend(run, f"rewards/{c}/mean")
            if df is not None and dc is not None and df > 0.05 and dc <= 0.0:
                flags.append(Flag("warn", code, f"{f} reward rose {df:+.3g} while {c} moved {dc:+.3g}"))
    reward, passes = _trend(run, REWARD), _trend(run, PASS1)
    if reward is not None and passes is not None and reward > 0.05 and passes < -0.05:
        flags.append(Flag("warn", "train_up_eval_down", f"train reward {reward:+.3g} but eval pass@1 {passes:+.3g}"))
    return flags


def rows(sweep: Sweep) -> list[Row]:
    """Table rows sorted by the objective (best first); seeds of one point share a row."""
    groups: dict[tuple, Row] = {}
    keys = [k for k in sweep.swept_keys if k not in SEED_KEYS]
    for run in sweep.runs:
        params = {k: run.params().get(k, "") for k in keys}
        key = tuple(params.items()) if keys else (run.name,)
        row = groups.setdefault(key, Row(params=params, runs=[]))
        row.runs.append(run)
        row.values.setdefault("objective", []).append(run.objective if run.objective is not None else math.nan)
        for metric, how in COLUMNS:
            value = stat(run, metric, how)
            row.values.setdefault(f"{metric}:{how}", []).append(value if value is not None else math.nan)
        row.flags += health(run)
    out = list(groups.values())
    sign = -1.0 if sweep.direction == "maximize" else 1.0

    def order(row: Row) -> tuple[int, float]:
        m, _ = mean_std(row.values["objective"])
        return (1, 0.0) if m is None else (0, sign * m)

    return sorted(out, key=order)


def best_row(sweep: Sweep) -> Row | None:
    ranked = rows(sweep)
    return ranked[0] if ranked and mean_std(ranked[0].values["objective"])[0] is not None else None
