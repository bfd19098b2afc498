"""Read run dirs (local or fsspec URLs) into `Run`s: overrides, metric series, summary, state.

Input is a sweep dir (with sweep.json, or just numbered job dirs) or explicit run dirs.
Only the run-dir contract is read (metrics.jsonl, summary.json, .hydra/overrides.yaml), never a
tracking service, so a report works offline and for runs that crashed half-way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from rlexp import storage
from rlexp.errors import RunError
from rlexp.sweep import manifest as mf

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Run:
    name: str
    dir: str
    overrides: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # .hydra/config.yaml of a run with metrics
    state: str = "pending"
    objective: float | None = None
    num: int | None = None
    wandb_run_id: str | None = None

    def last_samples(self, limit: int = 6) -> list[dict[str, Any]]:
        """Up to `limit` rows of samples.jsonl from the last step that wrote samples."""
        rows = storage.read_jsonl(storage.join(self.dir, "samples.jsonl"))
        if not rows:
            return []
        last = max(int(r.get("step", 0)) for r in rows)
        return [r for r in rows if int(r.get("step", 0)) == last][:limit]

    def params(self) -> dict[str, str]:
        out = {}
        for item in self.overrides:
            key, _, value = item.lstrip("+~").partition("=")
            out[key] = value
        return out

    def series(self, metric: str) -> list[tuple[int, float]]:
        """(step, value) for every row carrying a finite value of `metric`, last write per step wins."""
        points: dict[int, float] = {}
        for row in self.rows:
            value = row.get(metric)
            if isinstance(value, int | float) and not isinstance(value, bool) and "step" in row:
                points[int(row["step"])] = float(value)
        return sorted(points.items())

    def metric_names(self) -> set[str]:
        return {k for row in self.rows for k in row if k != "step"}


@dataclass
class Sweep:
    title: str
    runs: list[Run]
    swept_keys: list[str]
    objective: str = "eval.after.pass_at_1"
    direction: str = "maximize"
    group: str | None = None
    source: str = ""
    wandb: dict[str, Any] = field(default_factory=dict)  # project / entity the sweep logged to


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _yaml(path: str) -> Any:
    """A YAML file's data (None when absent or empty), parsed by libyaml when PyYAML has it: a report over a
    1,000-job sweep reads a thousand of these files."""
    text = storage.read_text(path)
    return yaml.load(text, Loader=_LOADER) if text else None


def load_run(run_dir: str, *, objective: str, name: str | None = None) -> Run:
    """One run dir; its config (.hydra/config.yaml) is read only when it logged metrics, which is all the report
    analyses with it (a dry-run sweep's jobs have none)."""
    names = storage.list_names(run_dir)  # one listing, not a probe for each file a pending job lacks

    def has(name: str) -> bool:
        return names is None or name in names

    overrides = (_yaml(storage.join(run_dir, ".hydra", "overrides.yaml")) if has(".hydra") else None) or []
    summary = (storage.read_json(storage.join(run_dir, "summary.json")) if has("summary.json") else None) or {}
    for what, value, kind in (("summary.json", summary, dict), (".hydra/overrides.yaml", overrides, list)):
        if not isinstance(value, kind):
            raise RunError(
                f"{storage.join(run_dir, what)}: holds a {type(value).__name__}, not the {kind.__name__} "
                "a run writes; move the file away (or rerun that run) and report again"
            )
    if not overrides and isinstance(summary.get("overrides"), list):
        overrides = summary["overrides"]
    rows = storage.read_jsonl(storage.join(run_dir, "metrics.jsonl")) if has("metrics.jsonl") else []
    config = (_yaml(storage.join(run_dir, ".hydra", "config.yaml")) or {}) if rows else {}
    run = Run(
        name=name or summary.get("run_name") or str(run_dir).rstrip("/").rsplit("/", 1)[-1],
        dir=str(run_dir),
        overrides=[str(o) for o in overrides],
        summary=summary if isinstance(summary, dict) else {},
        rows=rows,
        config=config if isinstance(config, dict) else {},
    )
    found = mf.read_job_files(run_dir, objective, names)
    run.state = found.get("state") or ("running" if run.rows else "pending")
    run.objective = _finite(found.get("objective"))
    run.wandb_run_id = found.get("wandb_run_id")
    return run


def _is_run_dir(path: str) -> bool:
    return any(storage.exists(storage.join(path, f)) for f in ("summary.json", "metrics.jsonl", ".hydra"))


def _dir_order(path: str) -> tuple[int, int, str]:
    leaf = path.rstrip("/").rsplit("/", 1)[-1]
    return (0, int(leaf), leaf) if leaf.isdigit() else (1, 0, leaf)


def varying_keys(runs: list[Run]) -> list[str]:
    """Override keys whose value differs between runs (the swept ones when no manifest says so)."""
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run.params() if k not in keys]
    return [k for k in keys if len({r.params().get(k) for r in runs}) > 1]


def load(inputs: list[str], *, objective: str | None = None) -> Sweep:
    """A sweep dir (sweep.json or numbered job dirs) or several run dirs."""
    if len(inputs) == 1 and not _is_run_dir(inputs[0]):
        sweep_dir = inputs[0]
        data = mf.load(sweep_dir)
        if data is not None:
            objective = objective or data["objective"]["name"]
            runs = []
            for job in data["jobs"]:
                run = load_run(mf.run_dir_of(sweep_dir, job), objective=objective, name=f"job {job['num']}")
                run.num = job["num"]
                run.overrides = run.overrides or list(job.get("overrides") or [])
                if run.state == "pending" and job["state"] in ("running", "failed"):
                    run.state = job["state"]
                run.wandb_run_id = run.wandb_run_id or job.get("wandb_run_id")
                runs.append(run)
            keys = [k for k in data.get("swept_keys") or [] if k != "sweep"] or varying_keys(runs)
            return Sweep(
                title=data.get("group") or data.get("name") or sweep_dir,
                runs=runs,
                swept_keys=keys,
                objective=objective,
                direction=data["objective"].get("direction", "maximize"),
                group=data.get("group"),
                source=sweep_dir,
                wandb=data.get("wandb") or {},
            )
        dirs = [d for d in storage.list_dirs(sweep_dir) if _is_run_dir(d)]
        dirs.sort(key=_dir_order)
        inputs, title = dirs, sweep_dir.rstrip("/").rsplit("/", 1)[-1]
    else:
        title = "runs"
    objective = objective or "eval.after.pass_at_1"
    runs = [load_run(d, objective=objective) for d in inputs]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # run_name repeats across a sweep: the dir tells runs apart
        for r in runs:
            r.name = "/".join(r.dir.rstrip("/").rsplit("/", 2)[-2:])
    return Sweep(title=title, runs=runs, swept_keys=varying_keys(runs), objective=objective, source=", ".join(inputs))
