"""The checks a launcher runs before it submits anything.

Per job (cheap, no downloads): the config rules (`rlexp.checks.check_config`), the mesh against the slice, and the
job's plan (`rlexp.train.plan.plan_submission`: its memory and cost estimates, each distinct one printed, and the
sweep's total; the job replays the plan instead of checking again). Once
per distinct model/data combination of a sweep: the project's preflight (`rlexp.checks.data_preflight`) with downloads
disabled, so it checks the tokenizer, data and weights only when they are at hand and names every check it could
not run. A dry run therefore needs neither weights nor network.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from rlexp import storage
from rlexp.checks import check_config, check_rules
from rlexp.config.derived import resolve_mesh
from rlexp.config.hardware import TPU_TOPOLOGIES
from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError, RlexpError
from rlexp.train.plan import RunPlan

log = logging.getLogger(__name__)
MAX_ESTIMATE_LINES = 5


def check_job(cfg: RlexpConfig, pathways: bool = True, *, values: bool = True) -> dict[str, Any]:
    """Config rules and slice fit; raises ConfigError before anything is rendered. Returns the memory estimate
    the rules were checked against. `values=False`: the single keys' values were checked already (a single
    run's plan checks them before it hands the run over, rlexp.train.plan.make_plan)."""
    s = cfg.slice
    if s.kind != "tpu":
        raise ConfigError(
            "slice",
            s.name,
            f"the GKE launcher runs TPU slices ({', '.join(TPU_TOPOLOGIES)}); use hydra/launcher=basic for {s.name}",
        )
    # the rules include resolve_mesh: fsdp x tp must equal the slice's trainer devices
    memory = check_config(cfg) if values else check_rules(cfg)
    fsdp, tp = resolve_mesh(s)
    if s.rollout_devices and s.rollout_devices % tp:
        raise ConfigError("slice.rollout_devices", s.rollout_devices, f"must be a multiple of slice.mesh.tp={tp}")
    if not pathways and s.num_slices > 1:
        raise ConfigError(
            "slice.num_slices", s.num_slices, "multislice needs Pathways: keep hydra.launcher.pathways=true"
        )
    if s.num_slices < 1:
        raise ConfigError("slice.num_slices", s.num_slices, "use 1 or more slices")
    return memory


class SharedChecks:
    """Runs the expensive preflight and prints the memory estimate once per distinct model/data/slice."""

    def __init__(self, allow_downloads: bool = False) -> None:
        self.allow_downloads = allow_downloads
        self.done: dict[tuple, dict] = {}
        self.skipped: set[str] = set()
        self.estimates: dict[str, tuple] = {}
        self.costs: list[dict] = []  # one per job

    def run_once(
        self, cfg: RlexpConfig, raw: Any, out_dir: Path, plan: RunPlan, env_elsewhere: str | None = None
    ) -> None:
        """Record the job's planned estimates; the preflight once per distinct model/data/templates/reward.
        `env_elsewhere`: why the env's server cannot be reached from here (its rows are checked by the job)."""
        from rlexp.estimates.memory import format_estimate

        assert plan.memory is not None and plan.cost is not None, plan
        if "error" in plan.cost:  # an unreadable cost.calibration: refused before anything is submitted
            raise RlexpError(plan.cost["error"])
        self.estimates.setdefault(format_estimate(plan.memory), (cfg.model.name, cfg.slice.name))
        self.costs.append(plan.cost)
        key = (
            repr(raw.get("model")),
            repr(raw.get("dataset")),
            repr(raw.get("chat_template")),
            repr(raw.get("data_template")),
            repr(raw.get("reward")),
            repr(raw.get("env")),  # a sweep over env.tasks' weights or configs: each env's rows are checked
        )
        if key in self.done:
            return
        from rlexp.checks.data_preflight import preflight

        out_dir.mkdir(parents=True, exist_ok=True)
        planned = {"checked": plan.memory, "cost": plan.cost}  # the preflight estimates nothing again
        result = preflight(cfg, str(out_dir), allow_downloads=self.allow_downloads, env_elsewhere=env_elsewhere,
                           **planned) or {}  # fmt: skip
        self.done[key] = result
        if not self.allow_downloads and storage.is_remote_source(cfg.dataset.source):
            if _data_not_here_is_skipped(result, cfg.dataset.source):
                (out_dir / "validation.json").write_text(json.dumps(result, indent=2, default=str))
        for item in _skipped(result):
            self.skipped.add(item)
        failed = [c for c in result.get("checks", []) if isinstance(c, dict) and c.get("status") == "failed"]
        if failed or result.get("ok") is False:
            what = "; ".join(f"{c.get('name')}: {c.get('detail') or c.get('message') or 'failed'}" for c in failed)
            raise RlexpError(
                f"preflight failed ({what or 'see validation.json'}); details in {out_dir}/validation.json"
            )

    def report(self) -> None:
        lines = list(self.estimates)
        for line in lines[:MAX_ESTIMATE_LINES]:
            print(f"rlexp: {line}")
        if len(lines) > MAX_ESTIMATE_LINES:
            print(f"rlexp: ... {len(lines) - MAX_ESTIMATE_LINES} more distinct memory estimates in this sweep")
        from rlexp.estimates.cost import format_cost, format_total, sweep_total

        lines = list(dict.fromkeys(format_cost(c) for c in self.costs))
        for line in lines[:MAX_ESTIMATE_LINES]:
            print(f"rlexp: {line}")
        if len(lines) > MAX_ESTIMATE_LINES:
            print(f"rlexp: ... {len(lines) - MAX_ESTIMATE_LINES} more distinct cost estimates in this sweep")
        if len(self.costs) > 1:
            print(f"rlexp: {format_total(sweep_total(self.costs))}")
        if self.skipped:
            print(
                "rlexp: preflight could not run here (the job runs them when it starts): "
                + "; ".join(sorted(self.skipped))
            )


def _skipped(result: dict) -> list[str]:
    """Checks the preflight skipped, from its validation.json-style dict (tolerant of its exact layout)."""
    out = []
    skipped = result.get("skipped")
    if isinstance(skipped, list):
        out += [str(s) for s in skipped]
    elif isinstance(skipped, dict):
        out += [f"{k}: {v}" for k, v in skipped.items()]
    for c in result.get("checks", []) if isinstance(result.get("checks"), list) else []:
        if isinstance(c, dict) and c.get("status") == "skipped":
            out.append(f"{c.get('name', '?')}: {c.get('reason', c.get('detail', ''))}")
    return out


def _data_not_here_is_skipped(result: dict, source: str | None) -> bool:
    """Without downloads, a remote dataset that is not cached here is skipped (and said so), not failed."""
    checks = [c for c in result.get("checks", []) if isinstance(c, dict)]
    if not any(c.get("name") == "dataset" and c.get("status") == "failed" for c in checks):
        return False
    for c in checks:
        if c.get("name") in ("dataset", "rows") and c.get("status") == "failed":
            c["status"] = "skipped"
            if c["name"] == "dataset":
                c["detail"] = f"{source} is not cached here (the job downloads it)"
    result["ok"] = all(c.get("status") != "failed" for c in checks)
    return True
