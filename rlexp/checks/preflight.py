"""The preflight that `python -m rlexp.validate <overrides>` runs: data, prompts and rewards before a launch.

On the same config tree as training it validates the config, loads the dataset, renders
`validate.rows` prompts (refusing doubled turn markers, printing one prompt), gets
completions — sampled with the configured model, or read from `validate.completions`
(jsonl of {id, completion}; then no model or tokenizer is needed) — and calls every reward.
It writes `validation.json` to the run dir: per reward {mean, min, max, n, errors,
non_finite, out_of_range}, the share of prompt groups whose total reward has zero variance,
the memory estimate, the checks, and per completion its id and each reward's value.
Exit status 1 when a check fails: a reward missing (raised or returned too few values),
non-finite or outside its `range`, doubled markers, unusable data or config. Launchers call
`preflight()` before submitting (opt out with `validate.skip=true`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from typing import Any

from rlexp import storage
from rlexp.checks import check_config
from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError, RlexpError, RunError


class _Report:
    def __init__(self) -> None:
        self.checks: list[dict[str, Any]] = []
        self.skipped: list[str] = []

    def add(self, name: str, status: str, detail: str = "") -> None:
        self.checks.append({"name": name, "status": status, "detail": detail})
        if status == "skipped":
            self.skipped.append(f"{name}: {detail}")

    def run(self, name: str, fn: Any) -> Any:
        """Run one check; a user error becomes a failed check instead of ending the preflight."""
        try:
            out = fn()
        except RlexpError as err:
            self.add(name, "failed", str(err))
            return None
        except Exception as err:  # noqa: BLE001 - a crash (sampler, tokenizer) is a failed check, reported in full
            self.add(name, "failed", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:500])
            return None
        self.add(name, "ok")
        return out

    @property
    def ok(self) -> bool:
        return all(c["status"] != "failed" for c in self.checks)


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

    from rlexp.models.loader import load_model, load_tokenizer

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
            }
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
        if cfg.reward.combine == "weighted_mean_clipped":
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


def _memory(cfg: RlexpConfig, rep: _Report) -> dict[str, Any] | None:
    from rlexp.config.memory import estimate_memory, format_estimate

    try:
        est = estimate_memory(cfg)
    except Exception as err:  # noqa: BLE001 - the estimate is advisory; config errors are reported by "config"
        rep.add("memory", "warning", f"no estimate: {err}")
        return None
    rep.add("memory", "ok", format_estimate(est))
    if est and est.get("capacity") and est["total"] > est["capacity"]:
        gib = 2**30
        rep.add("memory_fits", "warning", f"estimate {est['total'] / gib:.1f} GiB > {est['capacity'] / gib:.1f} GiB")
    return est


def _cost(cfg: RlexpConfig, rep: _Report) -> dict[str, Any] | None:
    """Chip-hours and cost of the run (rlexp.config.cost); an unreadable calibration run dir fails the check."""
    from rlexp.config.cost import estimate_cost, format_cost

    est = rep.run("cost", lambda: estimate_cost(cfg))
    if est is not None:
        rep.checks[-1]["detail"] = format_cost(est)
    return est


def _needs_download(cfg: RlexpConfig) -> bool:
    path = cfg.model.path or ""
    return not path or "://" in path


def _tokenizer_here(cfg: RlexpConfig) -> Any:
    """The model's tokenizer when this machine has it without downloading (a local folder, or the hub cache)."""
    m = cfg.model
    from rlexp.models.loader import load_tokenizer

    if m.path and "://" not in m.path:
        return load_tokenizer(m)
    if m.path or not m.hf_id:
        return None
    from huggingface_hub import snapshot_download

    from rlexp.models.hub import CONFIG_AND_TOKENIZER_FILES
    from rlexp.models.tokenizer import load_tokenizer_dir

    try:
        folder = snapshot_download(m.hf_id, allow_patterns=list(CONFIG_AND_TOKENIZER_FILES), local_files_only=True)
    except Exception:  # noqa: BLE001 - not in the cache (huggingface_hub raises several types for that)
        return None
    return load_tokenizer_dir(folder)


def _data_checks(cfg: RlexpConfig, splits: Any, rep: _Report, result: dict[str, Any]) -> None:
    """What training checks on its data before the first step: prompts rendered and length-filtered as training
    renders them (when the tokenizer is here), max_steps against the rows left, doubled turn markers."""
    from rlexp.config.validate import check_steps
    from rlexp.data.templates import MARKER_ROWS, marker_problems, render_rows, render_splits

    t, dt, ct = cfg.trainer, cfg.data_template, cfg.chat_template
    tokenizer = rep.run("tokenizer", lambda: _tokenizer_here(cfg))
    if tokenizer is None and rep.checks[-1]["status"] == "ok":
        rep.checks.pop()
        rep.add(
            "prompt_lengths",
            "skipped",
            f"model {cfg.model.name}'s tokenizer is not here: prompts over trainer.max_prompt_tokens="
            f"{t.max_prompt_tokens} are not filtered out, so the rows counted below include them",
        )
    fitting = splits
    if tokenizer is not None:
        fitting = rep.run("prompt_lengths", lambda: render_splits(splits, dt, ct, tokenizer, t.max_prompt_tokens))
        if fitting is None:
            return
        result["dataset"].update(
            train_rows=len(fitting.train), eval_rows=len(fitting.eval), skipped=dict(fitting.skipped)
        )
    if cfg.dataset.train_size < 0 or len(fitting.train) < cfg.dataset.train_size:
        rep.run("steps_fit_data", lambda: check_steps(cfg, len(fitting.train)))
    if ct.chat == "tokenizer" and tokenizer is None:
        rep.add("turn_markers", "skipped", "chat_template.chat=tokenizer needs the model's tokenizer, not here")
        return
    # the first rows before the length filter, as training checks them (doubled markers may empty the filter)
    problems = marker_problems(render_rows(splits.train[:MARKER_ROWS], dt, ct, tokenizer), dt, ct)
    rep.add("turn_markers", "failed" if problems else "ok", "; ".join(problems))


def _not_run(rep: _Report, names: tuple[str, ...], why: str) -> None:
    for name in names:
        if not any(c["name"] == name for c in rep.checks):
            rep.add(name, "skipped", why)


def preflight(cfg: RlexpConfig, out_dir: str, *, allow_downloads: bool = True) -> dict[str, Any]:
    """Run every check, write `<out_dir>/validation.json` and return its content (`ok` says whether all passed)."""
    from rlexp.data.registry import load_splits
    from rlexp.data.templates import doubled_markers, render_prompt

    v, rep = cfg.validate, _Report()
    result: dict[str, Any] = {"run_name": cfg.run_name, "mode": "completions" if v.completions else "sampled"}
    if v.skip:  # the explicit opt-out launchers honour: nothing is checked, and the file says so
        rep.add("preflight", "skipped", "validate.skip=true")
        result.update(ok=True, checks=rep.checks, skipped=rep.skipped)
        _write(out_dir, result)
        return result
    rep.run("config", lambda: check_config(cfg))
    result["memory"] = _memory(cfg, rep)
    result["cost"] = _cost(cfg, rep)
    given = rep.run("completions_file", lambda: read_completions(v.completions)) if v.completions else None
    if v.completions and given is None:  # stop at the first input error: no dataset, no model
        result.update(ok=False, checks=rep.checks, skipped=rep.skipped)
        _write(out_dir, result)
        return result
    splits = None
    if not (given and all("answer" in g and "prompt" in g for g in given)):
        if not allow_downloads and storage.is_remote_source(cfg.dataset.source):
            # without downloads a hub or gs:// dataset is checked only when it is already cached here
            try:
                splits = load_splits(cfg.dataset, allow_downloads=False)
                rep.add("dataset", "ok")
            except RlexpError as err:
                rep.add("dataset", "skipped", f"{cfg.dataset.source} is not available offline ({err})")
        else:
            splits = rep.run("dataset", lambda: load_splits(cfg.dataset, allow_downloads=allow_downloads))
    if splits is not None:
        result["dataset"] = {"train_rows": len(splits.train), "eval_rows": len(splits.eval), "skipped": splits.skipped}
        if splits.skipped:  # rows training would drop (corrupt lines, missing fields): counted, never silent
            dropped = ", ".join(f"{n} {why}" for why, n in sorted(splits.skipped.items()))
            rep.add("dataset_rows", "warning", f"{dropped} (of {cfg.dataset.name}); training skips these rows")
        _data_checks(cfg, splits, rep, result)
    elif any(c["name"] == "dataset" and c["status"] == "skipped" for c in rep.checks):
        _not_run(rep, ("prompt_lengths", "steps_fit_data", "turn_markers"), "needs the dataset's rows")
    items: list[dict[str, Any]] = []
    if v.completions and given is not None:
        known = {r["id"]: r for r in (splits.train + splits.eval)} if splits else {}
        for g in given:
            row = {**known.get(str(g["id"]), {}), **{k: val for k, val in g.items() if k != "completion"}}
            if "answer" not in row or not ("prompt" in row or "question" in row):
                continue
            if "prompt" not in row:
                row["prompt"] = render_prompt(row, cfg.data_template, cfg.chat_template)
            items.append({**row, "id": str(g["id"]), "completion": g["completion"]})
        unknown = sorted({str(g["id"]) for g in given} - {it["id"] for it in items})
        if unknown:
            rep.add("completion_ids", "failed", f"not in the dataset and without answer and prompt: {unknown[:10]}")
    elif splits is not None:
        rows = splits.train[: v.rows]
        if not allow_downloads and _needs_download(cfg):
            rep.add("completions", "skipped", f"model {cfg.model.name} is not downloaded here")
            rep.add("rewards", "skipped", "no completions to score here (validate.completions=<jsonl> scores some)")
        else:
            items = rep.run("completions", lambda: _sampled_items(cfg, rows)) or []
    if items:
        problems = [
            p
            for it in items
            if "question" in it
            for p in doubled_markers(it, cfg.data_template, cfg.chat_template, it["prompt"])
        ]
        if not any(c["name"] == "turn_markers" for c in rep.checks):  # else the dataset's prompts were checked
            rep.add("turn_markers", "failed" if problems else "ok", "; ".join(dict.fromkeys(problems)))
        result["example_prompt"] = {"id": items[0]["id"], "prompt": items[0]["prompt"]}
        print(f"rlexp: example prompt (row {items[0]['id']}):\n{items[0]['prompt']}\n---", flush=True)
        if cfg.model.instruction_tuned and cfg.chat_template.chat is None:
            rep.add("chat_template", "warning", "instruction-tuned model prompted without a chat template")
        summary, totals, rows_out = score(cfg, items)
        for name, s in summary.items():
            bad = s["errors"] + s["non_finite"] + s["out_of_range"]
            detail = (
                f"{s['errors']} errors, {s['non_finite']} non-finite, {s['out_of_range']} outside {s['range']}"
                + (f" ({s['last_error']})" if s.get("last_error") else "")
                if bad
                else ""
            )
            rep.add(f"reward:{name}", "failed" if bad else "ok", detail)
        result["rewards"] = summary
        result["zero_variance_share"] = zero_variance_share(items, totals)
        result["rows"] = rows_out
    elif not any(c["name"] in ("dataset", "completions") and c["status"] == "skipped" for c in rep.checks):
        rep.add("rows", "failed", "no rows to score")
    if not items and splits is None and given is None:
        _not_run(rep, ("rewards",), "needs the dataset's rows")
    result.update(ok=rep.ok, checks=rep.checks, skipped=rep.skipped)
    _write(out_dir, result)
    return result


def _sampled_items(cfg: RlexpConfig, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from rlexp.data.templates import render_rows
    from rlexp.models.loader import load_tokenizer

    tokenizer = load_tokenizer(cfg.model)
    skipped: dict[str, int] = {}
    budget = cfg.trainer.max_prompt_tokens
    rendered = render_rows(
        rows, cfg.data_template, cfg.chat_template, tokenizer, max_prompt_tokens=budget, skipped=skipped
    )
    if not rendered:
        raise RlexpError(
            f"none of {len(rows)} prompts fits trainer.max_prompt_tokens={cfg.trainer.max_prompt_tokens} "
            f"with model {cfg.model.name}'s tokenizer"
        )
    n, max_new = cfg.validate.generations, cfg.validate.max_new_tokens or cfg.trainer.max_completion_tokens
    texts = sample_completions(cfg, [r["prompt"] for r in rendered], n, max_new)
    return [{**r, "completion": texts[i * n + j]} for i, r in enumerate(rendered) for j in range(n)]


def _write(out_dir: str, result: dict[str, Any]) -> None:
    import fsspec

    fs, root = fsspec.core.url_to_fs(out_dir)
    fs.makedirs(root, exist_ok=True)
    with fsspec.open(f"{out_dir.rstrip('/')}/validation.json", "wt") as f:
        json.dump(result, f, indent=2, allow_nan=False, default=str)


def print_summary(result: dict[str, Any]) -> None:
    memory = next((c for c in result["checks"] if c["name"] == "memory" and c["status"] == "ok"), None)
    if memory:  # launchers print the estimate themselves, once per distinct estimate of a sweep
        print(f"rlexp: {memory['detail']}")
    for c in result["checks"]:
        if c["status"] != "ok":
            print(f"rlexp: preflight {c['status']}: {c['name']}: {c['detail']}")
    for name, s in result.get("rewards", {}).items():
        mean = "n/a" if s["mean"] is None else f"{s['mean']:.3f}"
        print(
            f"rlexp: reward {name}: mean {mean} over {s['n']}, errors {s['errors']}, "
            f"non-finite {s['non_finite']}, out of range {s['out_of_range']}"
        )
    zv = result.get("zero_variance_share")
    if zv is not None:
        print(f"rlexp: prompt groups with zero reward variance: {zv:.0%}")
    for c in result["checks"]:
        if c["name"] == "cost" and c["status"] == "ok":
            print(f"rlexp: {c['detail']}")
    not_run = [c["name"] for c in result["checks"] if c["status"] == "skipped"]
    verdict = "passed" if result["ok"] else "FAILED"
    if not_run:  # a pass that skipped checks says which, so it is not read as a full pass
        verdict += f"; {len(not_run)} check(s) could not run here: {', '.join(not_run)}"
    print(f"rlexp: preflight {verdict}")
