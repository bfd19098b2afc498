"""Chip-hours and cost of a run: estimated from its config before it starts, measured after it ran.

estimate: (max_steps x step time + eval time) x billed chips = chip-hours; x price per chip-hour = cost.
The step time comes from the first of:
  1. `cost.step_time_s` (seconds, e.g. read off an earlier run's `perf/step_time_sec`);
  2. `cost.calibration`: the run dir of a short run of the same config (5-10 steps); the median
     `perf/step_time_sec` of its steps after the first (which compiles) is the step time;
  3. `STEP_TIME_S`, measured step times per (model, slice);
  4. a roofline estimate from the model's size and the chips' public peak numbers (`roofline_step_s`): training
     FLOPs at MFU_TRAIN, rollout decoding bound by HBM bandwidth at DECODE_BW_EFF, every completion running to
     `max_completion_tokens x cost.completion_fill`. It is a planning number; calibrate before a large sweep.
     The lengths are the run's (rlexp.estimates.lengths): an environment's measured prompts, and its turns, each
     of which samples every row again after a prefill of the episode so far.
actual (summary.json, after the run): the run's wall-clock seconds x billed chips.
LLM judges (`reward=judge`) with `kwargs.price_per_million_tokens` add their tokens: estimated per step as
(the template's text / CHARS_PER_TOKEN + the prompt and completion it quotes + the judge's max_tokens) x
samples x completions per step, plus its eval calls (`judge_eval_calls`: every eval scores each prompt's strategy
passes and temperature-1 samples with every reward); the actual cost counts the tokens the endpoint reported
(`usage`), evals included.

Billed chips: every chip of the slice (trainer and rollout) times `slice.num_slices`; GPUs per node x nodes.
Prices: `PRICE_PER_CHIP_HOUR` (public on-demand list prices) unless `cost.price_per_chip_hour` is set. Pure Python.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from typing import Any

from rlexp.algorithms import off_policy
from rlexp.algorithms.registry import algorithm_of, extra_forward_passes, reference_copy
from rlexp.config.derived import trainer_devices
from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError
from rlexp.estimates.lengths import CAPS, Lengths, of
from rlexp.estimates.model_terms import BYTES, active_params, kv_cache_bytes_per_sequence, param_count

# USD per chip-hour, on-demand, as listed on cloud.google.com/tpu/pricing in 2025 (us-central1 / us-east
# regions; TPU v5p and v6e are priced per chip, v5e likewise). Other regions, Spot and commitments differ: set
# cost.price_per_chip_hour for yours. GPUs have no entry here (their price depends on the provider).
# v7x (TPU7x) has no published on-demand price (capacity is sold by reservation): its runs report chip-hours
# and cost nothing until cost.price_per_chip_hour is set.
PRICE_PER_CHIP_HOUR: dict[str, float] = {"v5p": 4.20, "v6e": 2.70, "v5litepod": 1.20, "cpu": 0.0}
PRICE_SOURCE = "cloud.google.com/tpu/pricing, on-demand list price (2025)"

# Public peaks per JAX device: bf16 FLOP/s and HBM bytes/s (Cloud TPU system architecture pages; NVIDIA H200
# sheet). A v7x chip (2,307 TFLOP/s bf16, docs.cloud.google.com/tpu/docs/tpu7x; 7.37 TB/s HBM, Google's Ironwood
# announcement) is two devices, so each gets half.
PEAK: dict[str, tuple[float, float]] = {
    "v7x": (2307e12 / 2, 7370e9 / 2),
    "v5p": (459e12, 2765e9),
    "v6e": (918e12, 1640e9),
    "v5litepod": (197e12, 819e9),
    "h200": (989e12, 4800e9),
}
MFU_TRAIN = 0.35  # share of peak FLOP/s a well-sharded training step reaches
DECODE_BW_EFF = 0.3  # share of HBM bandwidth a decode step reaches (weights and KV cache read once per token)
# Measured seconds per GRPO step, (model, slice) -> (seconds, where measured).
STEP_TIME_S: dict[tuple[str, str], tuple[float, str]] = {
    ("tiny", "cpu"): (0.056, "README: default run, 2-core CPU, steady state"),
}


def accelerator(cfg: RlexpConfig) -> str:
    """The price/peak key of the slice: TPU generation, GPU type, or cpu."""
    s = cfg.slice
    if s.kind == "tpu":
        return s.name.rpartition("-")[0]
    if s.kind == "gpu":
        return str(s.gpu_type or "gpu")
    return "cpu"


def billed_chips(cfg: RlexpConfig) -> int:
    s = cfg.slice
    if s.kind == "tpu":
        return int(s.chips) * int(s.num_slices)
    if s.kind == "gpu":
        return int(s.nodes) * int(s.gpus_per_node)
    return 0  # a local CPU run bills no accelerator


def _rollout_seconds(cfg: RlexpConfig, prompts: int, generations: int, chips: int, n: Lengths) -> float:
    """Per turn: prefill of the prompt and the episode so far at MFU_TRAIN, then one weights-and-KV read per
    generated token and rollout micro-batch (one turn, the whole completion, for a single-turn run)."""
    m, t = cfg.model, cfg.trainer
    flops, bandwidth = PEAK[accelerator(cfg)]
    turn = n.per_turn() * cfg.cost.completion_fill
    turns = min(n.turns, math.ceil(n.completion / n.per_turn()))  # the episode's token budget binds first
    per_micro = t.rollout_prompts()
    micro_batches = math.ceil(prompts / per_micro)
    sequences = min(per_micro, prompts) * generations
    seconds = 0.0
    for i in range(turns):
        context = n.prompt + i * turn  # the prompt, then the turns before this one
        seconds += 2 * active_params(m) * prompts * generations * context / (chips * flops * MFU_TRAIN)
        kv = kv_cache_bytes_per_sequence(m, int(context + turn / 2))
        per_token = (param_count(m) * BYTES[m.param_dtype] + sequences * kv) / (chips * bandwidth * DECODE_BW_EFF)
        seconds += micro_batches * turn * per_token
    return seconds


def roofline_step_s(cfg: RlexpConfig, lengths: Lengths | None = None) -> float | None:
    """Seconds per GRPO step from the model's size and the slice's peaks; None off known accelerators."""
    if accelerator(cfg) not in PEAK:
        return None
    m, t, s, n = cfg.model, cfg.trainer, cfg.slice, of(cfg, lengths)
    flops = PEAK[accelerator(cfg)][0]
    n_slices = max(int(s.num_slices), 1)
    train_chips = trainer_devices(s) * n_slices
    rollout_chips = (s.rollout_devices or trainer_devices(s)) * n_slices
    sequences = t.batch_size * t.num_generations
    tokens = sequences * (n.prompt + n.completion * cfg.cost.completion_fill)
    spec = algorithm_of(t)
    per_token = 6 + (2 if reference_copy(t) or spec.needs_reference(t) else 0)  # policy fwd+bwd, reference fwd
    # the algorithm's own passes (PPO: the old policy's log-probs, the critic's values and fwd+bwd) and model
    own = spec.reference_model(cfg)
    extra = 2 * extra_forward_passes(t) * active_params(m) + (2 * active_params(own) if own is not None else 0)
    train = (per_token * active_params(m) * t.num_iterations + extra) * tokens / (train_chips * flops * MFU_TRAIN)
    rollout = _rollout_seconds(cfg, t.batch_size, t.num_generations, rollout_chips, n)
    # trainer.off_policy on rollout devices of their own: the next batches sample while the trainer updates
    return max(train, rollout) if off_policy.concurrent(cfg) else train + rollout


@functools.lru_cache(maxsize=32)
def calibrated_step_s(run_dir: str) -> float:
    """Median `perf/step_time_sec` of a run's steps after its first (compilation), from its metrics.jsonl."""
    import fsspec

    path = f"{run_dir.rstrip('/')}/metrics.jsonl"
    try:
        with fsspec.open(path, "rt") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as err:
        raise ConfigError("cost.calibration", run_dir, f"cannot read {path} ({type(err).__name__})") from None
    times = [r["perf/step_time_sec"] for r in rows if r.get("step", 0) > 1 and "perf/step_time_sec" in r]
    if not times:
        raise ConfigError("cost.calibration", run_dir, "has no perf/step_time_sec after step 1: run 3+ steps first")
    return float(statistics.median(times))


def step_time(cfg: RlexpConfig, lengths: Lengths | None = None) -> tuple[float | None, str]:
    """(seconds per step, where the number comes from)."""
    c = cfg.cost
    if c.step_time_s is not None:
        return float(c.step_time_s), "cost.step_time_s"
    if c.calibration:
        return calibrated_step_s(c.calibration), f"calibration {c.calibration}"
    own = algorithm_of(cfg.trainer).measured_step_s  # e.g. PPO's: its step also trains the critic
    measured = (STEP_TIME_S if own is None else own).get((cfg.model.name, cfg.slice.name))
    if measured:
        return measured[0], f"measured ({measured[1]})"
    rough = roofline_step_s(cfg, lengths)
    if rough is not None:
        overlap = ", rollout overlapping the update" if off_policy.concurrent(cfg) else ""
        return rough, f"roofline (MFU {MFU_TRAIN}, decode bandwidth {DECODE_BW_EFF}{overlap})"
    return None, "unknown: set cost.step_time_s or cost.calibration=<run dir of a short run>"


def price(cfg: RlexpConfig) -> tuple[float | None, str]:
    """(USD per chip-hour, where it comes from)."""
    if cfg.cost.price_per_chip_hour is not None:
        return float(cfg.cost.price_per_chip_hour), "cost.price_per_chip_hour"
    key = accelerator(cfg)
    if key in PRICE_PER_CHIP_HOUR:
        return PRICE_PER_CHIP_HOUR[key], PRICE_SOURCE
    return None, f"no public price for {key} here: set cost.price_per_chip_hour"


CHARS_PER_TOKEN = 4  # English text; the judge's prompt template is sized with it
REFERENCE_TOKENS = 16  # a {references.<column>} (an answer) in the judge's template


def judges(cfg: RlexpConfig) -> list[tuple[str, dict[str, Any]]]:
    """(metric name, kwargs) of every LLM judge among the rewards."""
    return [(f.name or f.fn, dict(f.kwargs)) for f in cfg.reward.functions if f.fn == "judge"]


def judge_eval_calls(cfg: RlexpConfig, kwargs: dict[str, Any]) -> int:
    """Planned calls one judge answers in the run's evals: before, at each eval_every step short of max_steps (as
    the step hook runs them) and after; each eval scores eval_passes + eval_samples completions per prompt."""
    t = cfg.trainer
    evals = 2 + ((t.max_steps - 1) // t.eval_every if t.eval_every else 0)
    return evals * t.eval_prompts * (t.eval_passes + t.eval_samples) * int(kwargs.get("samples", 1))


def judge_tokens_per_step(cfg: RlexpConfig, kwargs: dict[str, Any]) -> int:
    """Planned tokens (prompt + answer) one judge spends in one training step."""
    t = cfg.trainer
    return _judge_call_tokens(cfg, kwargs) * int(kwargs.get("samples", 1)) * t.batch_size * t.num_generations


def _judge_call_tokens(cfg: RlexpConfig, kwargs: dict[str, Any]) -> int:
    """Planned tokens (prompt + answer) of one judge call."""
    from rlexp.config.judge import DEFAULT_TEMPLATE, placeholders

    t = cfg.trainer
    template = str(kwargs.get("prompt_template") or DEFAULT_TEMPLATE)
    fields = placeholders(template)
    quoted = t.max_prompt_tokens * fields.count("prompt") + int(
        t.max_completion_tokens * cfg.cost.completion_fill * fields.count("response")
    )
    refs = REFERENCE_TOKENS * sum(f.startswith("references.") for f in fields)
    return len(template) // CHARS_PER_TOKEN + quoted + refs + int(kwargs.get("max_tokens", 256))


def _judge_cost(cfg: RlexpConfig, tokens: dict[str, int]) -> dict[str, Any]:
    """{judge_tokens, judge_cost_usd} for tokens per judge; the cost is None when a judge has no price."""
    total, usd = 0, 0.0
    for name, kw in judges(cfg):
        n = int(tokens.get(name, 0))
        total += n
        price_m = kw.get("price_per_million_tokens")
        usd = None if price_m is None or usd is None else usd + n / 1e6 * float(price_m)
    return {"judge_tokens": total, "judge_cost_usd": None if usd is None else round(usd, 4)}


def _with_judge(out: dict[str, Any], cfg: RlexpConfig, tokens: dict[str, int]) -> dict[str, Any]:
    if not judges(cfg):
        return out
    out.update(_judge_cost(cfg, tokens))
    if out["judge_cost_usd"] is not None and out["cost_usd"] is not None:
        out["cost_usd"] = round(out["cost_usd"] + out["judge_cost_usd"], 2)
    return out


def _money(chip_hours: float | None, usd: float | None) -> float | None:
    return None if chip_hours is None or usd is None else round(chip_hours * usd, 2)


def check_cost(cfg: RlexpConfig) -> None:
    c = cfg.cost
    if not 0 < c.completion_fill <= 1:
        raise ConfigError("cost.completion_fill", c.completion_fill, "use the share of completion tokens, in (0, 1]")
    if c.step_time_s is not None and c.step_time_s <= 0:
        raise ConfigError("cost.step_time_s", c.step_time_s, "use seconds > 0, or null to estimate them")
    if c.price_per_chip_hour is not None and c.price_per_chip_hour < 0:
        raise ConfigError("cost.price_per_chip_hour", c.price_per_chip_hour, "use USD >= 0, or null for the list price")


def estimate_cost(cfg: RlexpConfig, lengths: Lengths | None = None) -> dict[str, Any]:
    """The run's planned chip-hours and cost, with every number it is made of; `lengths`: the run's sequence
    lengths (rlexp.estimates.lengths; None: the config's caps)."""
    check_cost(cfg)
    t, n = cfg.trainer, of(cfg, lengths)
    seconds, source = step_time(cfg, n)
    chips = billed_chips(cfg)
    evals = t.max_steps // t.eval_every + 2 if t.eval_every else 2  # before, every eval_every, after
    eval_s = None
    if seconds is not None and source.startswith("roofline"):
        chips_rollout = (cfg.slice.rollout_devices or trainer_devices(cfg.slice)) * max(int(cfg.slice.num_slices), 1)
        # completions per prompt: the strategy passes and the temperature-1 samples
        eval_s = evals * _rollout_seconds(cfg, t.eval_prompts, t.eval_samples + t.eval_passes, chips_rollout, n)
    # measured step times are steady-state training steps; evals are then left out (they are said to be)
    hours = None if seconds is None else (t.max_steps * seconds + (eval_s or 0.0)) / 3600
    chip_hours = None if hours is None else hours * chips
    usd, price_source = price(cfg)
    out = {
        "model": cfg.model.name,
        "slice": cfg.slice.name,
        "steps": t.max_steps,
        "step_time_s": None if seconds is None else round(seconds, 4),
        "step_time_source": source,
        "eval_s": None if eval_s is None else round(eval_s, 1),
        "hours": None if hours is None else round(hours, 6),
        "chips": chips,
        "chip_hours": None if chip_hours is None else round(chip_hours, 3),
        "price_per_chip_hour": usd,
        "price_source": price_source,
        "cost_usd": _money(chip_hours, usd),
    }
    planned = {
        name: judge_tokens_per_step(cfg, kw) * t.max_steps + _judge_call_tokens(cfg, kw) * judge_eval_calls(cfg, kw)
        for name, kw in judges(cfg)
    }
    if n.source != CAPS:
        out["lengths"] = n.to_dict()
    out = _with_judge(out, cfg, planned)
    if judges(cfg):  # of judge_tokens, what the evals' calls take
        out["judge_eval_calls"] = sum(judge_eval_calls(cfg, kw) for _, kw in judges(cfg))
        out["judge_eval_tokens"] = sum(_judge_call_tokens(cfg, kw) * judge_eval_calls(cfg, kw) for _, kw in judges(cfg))
    return out


def actual_cost(cfg: RlexpConfig, wall_seconds: float, judge_tokens: dict[str, int] | None = None) -> dict[str, Any]:
    """What the run used: its wall-clock time on every billed chip, plus the judge tokens it was billed for."""
    chips = billed_chips(cfg)
    chip_hours = wall_seconds / 3600 * chips
    usd, _ = price(cfg)
    out = {
        "wall_seconds": round(wall_seconds, 2),
        "chips": chips,
        "chip_hours": round(chip_hours, 3),
        "cost_usd": _money(chip_hours, usd),
    }
    return _with_judge(out, cfg, judge_tokens or {})


def summary_cost(cfg: RlexpConfig, wall_seconds: float, judge_tokens: dict[str, int] | None = None) -> dict[str, Any]:
    """summary.json's `cost`: the estimate the run was planned with beside what it used."""
    try:
        estimate: dict[str, Any] = estimate_cost(cfg)
    except ConfigError as err:  # e.g. a calibration run dir that went away: the run itself is fine
        estimate = {"error": str(err)}
    return {"estimate": estimate, "actual": actual_cost(cfg, wall_seconds, judge_tokens)}


def sweep_total(estimates: list[dict[str, Any]]) -> dict[str, Any]:
    """Chip-hours and cost of a sweep's runs; unknown parts are counted, not guessed."""
    known = [e for e in estimates if e["chip_hours"] is not None]
    priced = [e for e in estimates if e["cost_usd"] is not None]
    return {
        "runs": len(estimates),
        "chip_hours": round(sum(e["chip_hours"] for e in known), 3),
        "cost_usd": round(sum(e["cost_usd"] for e in priced), 2),
        "runs_without_estimate": len(estimates) - len(known),
        "runs_without_price": len(estimates) - len(priced),
    }


def format_cost(est: dict[str, Any]) -> str:
    """One line: how the chip-hours and cost of one run are made up."""
    head = f"cost estimate for {est['model']} on {est['slice']}: {est['steps']} steps"
    if est["step_time_s"] is None:
        return f"{head}, step time {est['step_time_source']}" + _judge_text(est)
    evals = f" + evals {est['eval_s'] / 3600:.2f} h" if est["eval_s"] else ""
    hours = est["hours"]
    span = f"{hours:.3g} h" if hours >= 0.1 else f"{hours * 3600:.3g} s"
    text = f"{head} x {est['step_time_s']:.3g} s [{est['step_time_source']}]{evals} = {span}"
    if not est["chips"]:
        return f"{text} on the local CPU (no accelerator billed)" + _judge_text(est)
    text += f" x {est['chips']} chips = {est['chip_hours']:.4g} chip-hours"
    if est["cost_usd"] is None:
        return f"{text}; cost: {est['price_source']}" + _judge_text(est)
    chip_usd = est["cost_usd"] - (est.get("judge_cost_usd") or 0.0)
    return f"{text} x ${est['price_per_chip_hour']:.2f} = ${chip_usd:,.2f} [{est['price_source']}]" + _judge_text(est)


def _judge_text(est: dict[str, Any]) -> str:
    if "judge_tokens" not in est:
        return ""
    usd = est["judge_cost_usd"]
    price_text = "unpriced (set the judge's kwargs.price_per_million_tokens)" if usd is None else f"${usd:,.2f}"
    return f"; judge: {est['judge_tokens']:,} tokens, {price_text}"


def format_total(total: dict[str, Any]) -> str:
    text = f"cost estimate for the sweep: {total['runs']} runs, {total['chip_hours']:.1f} chip-hours, "
    text += f"${total['cost_usd']:,.2f}"
    missing = [
        f"{total[k]} {k.replace('runs_', '').replace('_', ' ')}"
        for k in ("runs_without_estimate", "runs_without_price")
        if total[k]
    ]
    return text + (f" ({', '.join(missing)} not included)" if missing else "")
