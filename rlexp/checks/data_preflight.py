"""The preflight that `python -m rlexp.validate <overrides>` runs: data, prompts and rewards before a launch.

On the same config tree as training it validates the config, loads the dataset, renders
`validate.rows` prompts (refusing doubled turn markers, printing one prompt), gets
completions — sampled with the configured model, or read from `validate.completions`
(jsonl of {id, completion}; then no model or tokenizer is needed) — and calls every reward
(rlexp.checks.reward_preflight). It writes `validation.json` to the run dir: per reward {mean, min, max, n,
errors, non_finite, out_of_range}, the share of prompt groups whose total reward has zero variance,
the memory estimate, the checks, and per completion its id and each reward's value.
Exit status 1 when a check fails: a reward missing (raised or returned too few values),
non-finite or outside its `range`, doubled markers, unusable data or config. Launchers call
`preflight()` before submitting (opt out with `validate.skip=true`).
"""

from __future__ import annotations

import json
from typing import Any

from rlexp import storage
from rlexp.checks import check_config, estimates, run_lengths
from rlexp.checks.reward_preflight import read_completions, sampled_items, score, zero_variance_share
from rlexp.config.schema import RlexpConfig
from rlexp.errors import RlexpError


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


def _memory(cfg: RlexpConfig, rep: _Report, checked: dict[str, Any] | None) -> dict[str, Any] | None:
    from rlexp.estimates.memory import estimate_memory, format_estimate

    try:
        est = checked if checked is not None else estimate_memory(cfg, run_lengths(cfg))
    except Exception as err:  # noqa: BLE001 - the estimate is advisory; config errors are reported by "config"
        rep.add("memory", "warning", f"no estimate: {err}")
        return None
    rep.add("memory", "ok", format_estimate(est))
    if est and est.get("capacity") and est["total"] > est["capacity"]:
        gib = 2**30
        rep.add("memory_fits", "warning", f"estimate {est['total'] / gib:.1f} GiB > {est['capacity'] / gib:.1f} GiB")
    return est


def _cost(
    cfg: RlexpConfig, rep: _Report, memory: dict[str, Any] | None, planned: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Chip-hours and cost of the run, as a run's plan estimates them (rlexp.checks.estimates; `planned`: the
    estimate a launcher's plan made already); an unreadable calibration run dir fails the check."""
    from rlexp.estimates.cost import format_cost

    est = rep.run("cost", lambda: planned if planned is not None else estimates(cfg, memory or {})["cost"])
    if est is not None and "error" in est:
        rep.checks[-1].update(status="failed", detail=est["error"])
        return None
    if est is not None:
        rep.checks[-1]["detail"] = format_cost(est)
    return est


def _needs_download(cfg: RlexpConfig) -> bool:
    path = cfg.model.path or ""
    return not path or "://" in path


def _tokenizer_here(cfg: RlexpConfig) -> Any:
    """The model's tokenizer when this machine has it without downloading (rlexp.models.loader.local_tokenizer)."""
    from rlexp.models.loader import local_tokenizer

    return local_tokenizer(cfg.model)


def _data_checks(cfg: RlexpConfig, splits: Any, rep: _Report, result: dict[str, Any]) -> None:
    """What training checks on its data before the first step: prompts rendered and length-filtered as training
    renders them (when the tokenizer is here), max_steps against the rows left, doubled turn markers."""
    from rlexp.config.validate import check_steps
    from rlexp.data.templates import MARKER_ROWS, marker_problems, render_rows, render_splits
    from rlexp.envs import tools_prompt  # env=class: the class's tools

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
        system = tools_prompt(cfg)
        fitting = rep.run(
            "prompt_lengths", lambda: render_splits(splits, dt, ct, tokenizer, t.max_prompt_tokens, system)
        )
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
    rows = render_rows(splits.train[:MARKER_ROWS], dt, ct, tokenizer, system=tools_prompt(cfg))
    problems = marker_problems(rows, dt, ct)
    rep.add("turn_markers", "failed" if problems else "ok", "; ".join(problems))


def _not_run(rep: _Report, names: tuple[str, ...], why: str) -> None:
    for name in names:
        if not any(c["name"] == name for c in rep.checks):
            rep.add(name, "skipped", why)


def preflight(
    cfg: RlexpConfig,
    out_dir: str,
    *,
    allow_downloads: bool = True,
    checked: dict[str, Any] | None = None,
    cost: dict[str, Any] | None = None,
    env_elsewhere: str | None = None,
) -> dict[str, Any]:
    """Run every check, write `<out_dir>/validation.json` and return its content (`ok` says whether all passed).
    `checked`: the memory estimate `check_config` returned, when the caller checked the config already; `cost`:
    the cost estimate a launcher's plan made (rlexp.train.plan.plan_submission); `env_elsewhere`: why the env's
    server is out of reach here (a pod's sidecar): its rows and dry run are skipped, the job meets them."""
    from rlexp.data.registry import load_splits
    from rlexp.data.templates import doubled_markers, render_prompt
    from rlexp.envs import dry_run, load_rows

    v, rep = cfg.validate, _Report()
    result: dict[str, Any] = {"run_name": cfg.run_name, "mode": "completions" if v.completions else "sampled"}
    if v.skip:  # the explicit opt-out launchers honour: nothing is checked, and the file says so
        rep.add("preflight", "skipped", "validate.skip=true")
        result.update(ok=True, checks=rep.checks, skipped=rep.skipped)
        _write(out_dir, result)
        return result
    if checked is None:
        checked = rep.run("config", lambda: check_config(cfg))
    else:
        rep.add("config", "ok")
    result["memory"] = _memory(cfg, rep, checked)
    result["cost"] = _cost(cfg, rep, result["memory"], cost)  # with the memory: the estimates a run's plan holds
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
        elif env_elsewhere:
            rep.add("dataset", "skipped", f"{env_elsewhere} (the job reads its rows when it starts)")
        else:
            splits = rep.run("dataset", lambda: load_rows(cfg, allow_downloads=allow_downloads))  # or the env's
        for check in (
            rep.run("env", lambda: dry_run(cfg)) if cfg.env.kind != "none" and not env_elsewhere else None
        ) or []:  # per env task: rows, the scorer right and wrong
            rep.add(check["name"], check["status"], check["detail"])
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
            items = rep.run("completions", lambda: sampled_items(cfg, rows)) or []
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
        if cfg.agent.kind == "tools":  # the parser and the tools on the same completions
            from rlexp.checks.tool_preflight import add_check

            add_check(cfg, items, rep, result)
        result["zero_variance_share"] = zero_variance_share(items, totals)
        result["rows"] = rows_out
    elif not any(c["name"] in ("dataset", "completions") and c["status"] == "skipped" for c in rep.checks):
        rep.add("rows", "failed", "no rows to score")
    if not items and splits is None and given is None:
        _not_run(rep, ("rewards",), "needs the dataset's rows")
    result.update(ok=rep.ok, checks=rep.checks, skipped=rep.skipped)
    _write(out_dir, result)
    return result


def _write(out_dir: str, result: dict[str, Any]) -> None:
    import fsspec

    fs, root = fsspec.core.url_to_fs(out_dir)
    fs.makedirs(root, exist_ok=True)
    from rlexp.redact import scrub

    text = scrub(json.dumps(result, indent=2, allow_nan=False, default=str))  # a judge's echoed key, say
    with fsspec.open(f"{out_dir.rstrip('/')}/validation.json", "wt") as f:
        f.write(text)


def reward_table(rewards: dict[str, Any]) -> str:
    """The preflight's rewards as an aligned table: one row per reward, `-` where a number does not apply."""

    def num(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    head = ("reward", "weight", "n", "mean", "min", "max", "errors", "non-finite", "out", "range", "seconds", "tokens")
    rows = [head]
    for name, s in rewards.items():
        rows.append((
            name, num(s.get("weight"), "g"), str(s["n"]), num(s["mean"], ".3f"), num(s["min"], ".3f"),
            num(s["max"], ".3f"), str(s["errors"]), str(s["non_finite"]), str(s["out_of_range"]),
            "[{:g}, {:g}]".format(*s["range"]), num(s.get("seconds"), ".2f"), num(s.get("judge_tokens"), ".0f"),
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("rlexp:   " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


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
    if result.get("rewards"):
        print(reward_table(result["rewards"]))
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
