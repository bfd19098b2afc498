"""The reward half of the preflight: the completions to score, read from `validate.completions` (jsonl of
{id, completion}) or sampled with the configured model on one local device, and every reward called on them
(per reward: mean, min, max, errors, non-finite and out-of-range values, seconds, and a judge's tokens,
latency and RPC-error/invalid ratios; the share of prompt groups whose total reward does not vary). `rlexp.checks.data_preflight.preflight` runs it after the data checks.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections import defaultdict
from typing import Any

from rlexp import storage
from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError, RlexpError, RunError


def read_completions(path: str) -> list[dict[str, Any]]:
    """Lines {id, completion} (optionally prompt, answer) of a jsonl file."""
    key = f"validate.completions={path}"
    if not storage.exists(path):
        raise ConfigError("validate.completions", path, "no such file; give a jsonl of {id, completion} lines")
    text = storage.read_bytes(path)
    try:
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise RunError(f"{key}: not UTF-8 text (byte {err.start}); give a jsonl of {{id, completion}} lines") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise RunError(f"{key}: line {n} is not JSON ({err.msg}); fix or drop that line") from None
        if not isinstance(rec, dict) or "id" not in rec or not isinstance(rec.get("completion"), str):
            raise RunError(f"{key}: line {n} needs an id and a string completion; fix or drop that line")
        out.append(rec)
    if not out:
        raise RunError(f"{key}: holds no completions; give a jsonl of {{id, completion}} lines")
    return out


def sample_completions(cfg: RlexpConfig, prompts: list[str], n: int, max_new: int) -> list[str]:
    """n completions per prompt from the configured model on one local device (prompt-major order)."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, Mesh
    from tunix.generate.sampler import CacheConfig, Sampler

    from rlexp.families.load import load_model
    from rlexp.models.loader import load_tokenizer

    m, t = cfg.model, cfg.trainer
    tokenizer = load_tokenizer(m)
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    model = load_model(m, mesh)
    longest = max(len(tokenizer.encode(p)) for p in prompts)
    prompt_len = 1 << max(longest, t.max_prompt_tokens, 1).bit_length()
    cache = CacheConfig(
        cache_size=prompt_len + max_new, num_layers=m.num_layers, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim
    )
    sampler = Sampler(model, tokenizer, cache)
    with jax.set_mesh(mesh):
        out = sampler(
            [p for p in prompts for _ in range(n)],
            max_generation_steps=max_new,
            max_prompt_length=prompt_len,
            temperature=t.temperature,
            top_p=t.top_p,
            top_k=min(t.top_k, m.vocab_size) if t.top_k else None,
            seed=cfg.seed,
        )
    return list(out.text)


def _as_float(x: Any) -> float:
    try:
        return math.nan if x is None else float(x)
    except (TypeError, ValueError):
        return math.nan


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


def score(cfg: RlexpConfig, items: list[dict[str, Any]]) -> tuple[dict[str, Any], list[float], list[dict[str, Any]]]:
    """Call every reward once on all items; (per-reward summary, total per item, per-item values)."""
    from rlexp.rewards.compose import build_rewards

    reward_set = build_rewards(cfg.reward)
    n = len(items)
    keys = dict.fromkeys(k for it in items for k in it if k not in ("prompt", "completion"))
    fields = {k: [it.get(k) for it in items] for k in keys}
    summary: dict[str, Any] = {}
    columns: dict[str, list[float]] = {}
    try:
        for r, fcfg in zip(reward_set.rewards, cfg.reward.functions, strict=True):
            lo, hi = fcfg.range
            raised = None
            failed = 0  # values that are an error, not a score: a failed call, a string, a NaN with a cause
            t0 = time.monotonic()
            try:
                raw = list(r.raw([it["prompt"] for it in items], [it["completion"] for it in items], **fields))
                if len(raw) != n:
                    raise ValueError(f"returned {len(raw)} values for {n} completions")
                values = [_as_float(x) for x in raw]
                wrong = [x for x in raw if x is not None and (isinstance(x, bool) or math.isnan(_as_float(x)))]
                wrong = [x for x in wrong if not isinstance(x, float)]
                if wrong:
                    raised = f"returned {type(wrong[0]).__name__} {wrong[0]!r:.80} where a number belongs"
                    failed = len(wrong)
            except Exception as err:  # noqa: BLE001 - the preflight reports any reward failure
                raised, values, failed = f"{type(err).__name__}: {err}"[:500], [math.nan] * n, n
            seconds = time.monotonic() - t0
            item_error = getattr(r.raw, "last_error", None)  # e.g. the http reward's unreachable service
            if item_error and not failed:
                failed = sum(not math.isfinite(x) for x in values)
            error = raised or item_error
            finite = [x for x in values if math.isfinite(x)]
            summary[r.name] = {
                "mean": statistics.fmean(finite) if finite else None,
                "min": min(finite) if finite else None,
                "max": max(finite) if finite else None,
                "n": n,
                "errors": failed,
                "non_finite": n - len(finite) - failed,
                "out_of_range": sum(not lo <= v <= hi for v in finite),
                "range": [lo, hi],
                "weight": r.weight,
                "seconds": round(seconds, 3),
            }
            own = getattr(r.raw, "drain_metrics", None)  # a remote judge: tokens, latency, RPC-error/invalid ratios
            if callable(own):
                summary[r.name].update(own())
            if error:
                summary[r.name]["last_error"] = error
            for key in ("counters",):
                if isinstance(getattr(r.raw, key, None), dict):
                    summary[r.name][key] = dict(getattr(r.raw, key))
            columns[r.name] = values
    finally:
        reward_set.close()
    totals = []
    weights = {r.name: r.weight for r in reward_set.rewards}
    for i in range(n):
        vals = {k: (c[i] if math.isfinite(c[i]) else 0.0) for k, c in columns.items()}
        if cfg.reward.combine in ("weighted_mean", "weighted_mean_clipped"):
            s = sum(weights[k] * max(-1.0, min(1.0, v)) for k, v in vals.items()) / sum(weights.values())
            totals.append(max(-1.0, min(1.0, s)))
        else:
            totals.append(sum(weights[k] * v for k, v in vals.items()))
    rows = [
        {"id": it["id"], "rewards": {k: _finite_or_none(c[i]) for k, c in columns.items()}, "total": totals[i]}
        for i, it in enumerate(items)
    ]
    return summary, totals, rows


def zero_variance_share(items: list[dict[str, Any]], totals: list[float]) -> float | None:
    """Share of prompt groups (same id, >= 2 completions) whose total reward does not vary."""
    groups: dict[str, list[float]] = defaultdict(list)
    for it, t in zip(items, totals, strict=True):
        groups[str(it["id"])].append(t)
    sized = [g for g in groups.values() if len(g) >= 2]
    return sum(max(g) - min(g) < 1e-9 for g in sized) / len(sized) if sized else None


def sampled_items(cfg: RlexpConfig, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows' prompts rendered as training renders them, each with `validate.generations` sampled completions."""
    from rlexp.data.templates import render_rows
    from rlexp.envs import tools_prompt  # env=class: the class's tools
    from rlexp.models.loader import load_tokenizer

    tokenizer = load_tokenizer(cfg.model)
    skipped: dict[str, int] = {}
    budget = cfg.trainer.max_prompt_tokens
    system = tools_prompt(cfg)  # the offered tools, with agent=tools
    rendered = render_rows(
        rows, cfg.data_template, cfg.chat_template, tokenizer, max_prompt_tokens=budget, skipped=skipped, system=system
    )
    if not rendered:
        raise RlexpError(
            f"none of {len(rows)} prompts fits trainer.max_prompt_tokens={cfg.trainer.max_prompt_tokens} "
            f"with model {cfg.model.name}'s tokenizer"
        )
    n, max_new = cfg.validate.generations, cfg.validate.max_new_tokens or cfg.trainer.max_completion_tokens
    texts = sample_completions(cfg, [r["prompt"] for r in rendered], n, max_new)
    return [{**r, "completion": texts[i * n + j]} for i, r in enumerate(rendered) for j in range(n)]
