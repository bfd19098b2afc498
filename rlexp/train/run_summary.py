"""summary.json of a training session and the lines a run ends with.

The summary holds what a run did (status, steps, evals before and after and their gain, data, cost estimate beside
the actual, the classes that ran, versions, the overrides and the plan it was made with); a sweep's objective is
read from it.
"""

from __future__ import annotations

import logging
from typing import Any

import jax

from rlexp import perf, storage
from rlexp.config.values import eval_metric_names
from rlexp.envs import task_summary
from rlexp.train import rundir

log = logging.getLogger(__name__)


def build_summary(session: Any, status: str, steps: int, wall: float) -> dict[str, Any]:
    """summary.json of a session (rlexp.train.session.TrainingSession: not imported, it imports this module) that
    ended with `status` after `steps` steps in `wall` seconds."""
    from hydra.core.hydra_config import HydraConfig

    from rlexp.estimates.cost import actual_cost

    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    summary = {
        "run_name": session.conf.run_name,
        "status": status,
        "objective": {"name": session.conf.objective, "value": None},
        "eval": {k: v for k, v in session.evals.items() if k in ("before", "after")},
        "train": {
            "steps": steps,
            "max_steps": session.conf.trainer.max_steps,
            "wall_seconds": round(wall, 2),
            "processes": jax.process_count(),
        },
        "data": {
            "train_rows": len(session.train_rows),
            "eval_rows": len(session.eval_rows),
            "skipped": session.data_skipped,
        },
        # estimate and actual chip-hours side by side, and the judge tokens the rewards counted
        # the plan's estimate (made before the run) beside what the run used
        "cost": {
            "estimate": session.plan.cost,
            "actual": actual_cost(session.conf, wall, _judge_tokens(getattr(session, "rewards", None))),
        },
        # profile.steps: the trace's folder, once a trace was written (a run stopped before the window has none)
        "profile": session.profile if session.profile and storage.exists(session.profile) else None,
        "perf": perf.summary(session.classes),  # patches applied (perf.patches), kernels built, classes that ran
        "versions": rundir.versions(),
        "overrides": overrides,
        "plan": session.plan.to_dict(),  # the decisions plan.json holds (rlexp.train.plan)
    }
    tasks = task_summary(session.conf, session.train_rows, session.eval_rows, session.adaptive)
    if tasks is not None:  # env=...: each task's weight and rows (a sweep over weights records its own)
        summary["data"]["tasks"] = tasks
    if "before" in session.evals and "after" in session.evals:
        summary["eval"]["gain"] = {
            k: session.evals["after"][k] - session.evals["before"][k]
            for k in eval_metric_names(session.evals["after"])
            if k in session.evals["after"] and k in session.evals["before"]
        }
    summary["objective"]["value"] = rundir.dotted_get(summary, session.conf.objective)
    return summary


def print_summary(s: dict[str, Any], run_dir: str) -> None:
    """The lines a run ends with: its status, each eval metric before -> after, the objective, the profile."""
    ev = s["eval"]
    lines = [
        f"\nrlexp run {s['run_name']}: {s['status']} after {s['train']['steps']} steps "
        f"in {s['train']['wall_seconds']:.1f} s  ({run_dir})"
    ]
    for k in eval_metric_names(ev.get("after", {})):
        before, after = ev.get("before", {}).get(k), ev.get("after", {}).get(k)
        if before is not None and after is not None:
            lines.append(f"  {k:<16} {before:.3f} -> {after:.3f}  ({after - before:+.3f})")
    obj = s["objective"]
    if obj["value"] is not None:
        lines.append(f"  objective {obj['name']} = {obj['value']:.4f}")
    if s.get("profile"):
        lines.append(f"  profile   {s['profile']}  (XProf: xprof --logdir={s['profile']})")
    log.info("\n".join(lines))


def _judge_tokens(rewards: Any) -> dict[str, int]:
    """Tokens (prompt + completion) each LLM judge's endpoint reported over the run."""
    totals = rewards.token_totals() if rewards is not None else {}
    return {name: sum(t.values()) for name, t in totals.items()}
