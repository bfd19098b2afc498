"""A wandb Report (wandb-workspaces) for a sweep's group: curves, run comparer, parallel coordinates.

The Reports API is private and version-pinned (wandb-workspaces 0.4.13), so it is used only here.
Building the spec needs one lookup of the project's id; saving needs a logged-in wandb.
"""

from __future__ import annotations

import os
from typing import Any

from rlexp.report import analyze
from rlexp.report.load import Sweep

STEP = "rl_step"  # the step metric the wandb tracker defines


def _config_key(override_key: str) -> str:
    """wandb config keys are the flattened dotted config keys the tracker logs."""
    return override_key.lstrip("+~")


def build(sweep: Sweep, *, entity: str, project: str, title: str | None = None) -> Any:
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    if not sweep.group:
        raise ValueError("the wandb report needs a sweep group (a sweep dir with sweep.json)")
    keys = [k for k in sweep.swept_keys if k not in analyze.SEED_KEYS]
    runset = wr.Runset(
        entity=entity,
        project=project,
        name=sweep.group,
        filters=expr.And(expr.Metric("Group") == sweep.group),
        groupby=[f"config.{_config_key(keys[0])}"] if keys else [],
        order=[wr.OrderBy(name=f"summary.{sweep.objective}", ascending=sweep.direction != "maximize")],
    )
    curves = [
        wr.LinePlot(
            title=t,
            x=STEP,
            y=[m],
            smoothing_factor=0.6,
            groupby_rangefunc="stddev",
            layout=wr.Layout(x=x, y=y, w=12, h=6),
        )
        for (t, m), (x, y) in zip(
            [
                ("train reward", analyze.REWARD),
                ("eval pass@1", analyze.PASS1),
                ("KL", analyze.KL),
                ("completion length", analyze.LENGTH),
            ],
            [(0, 0), (12, 0), (0, 6), (12, 6)],
            strict=True,
        )
    ]
    columns = [wr.ParallelCoordinatesPlotColumn(metric=wr.Config(_config_key(k))) for k in keys]
    columns.append(wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric(sweep.objective)))
    panels = [
        *curves,
        wr.ParallelCoordinatesPlot(columns=columns, layout=wr.Layout(x=0, y=12, w=24, h=8)),
        wr.RunComparer(diff_only="split", layout=wr.Layout(x=0, y=20, w=24, h=10)),
    ]
    grid = wr.PanelGrid(runsets=[runset], panels=panels)
    return wr.Report(
        project=project,
        entity=entity,
        title=(title or f"rlexp sweep {sweep.group}")[:128],
        description=f"objective {sweep.objective} ({sweep.direction}); swept: {', '.join(keys) or '-'}",
        blocks=[
            wr.H1(text=f"Sweep {sweep.group}"),
            wr.P(text=f"Runs in group {sweep.group}, ranked by {sweep.objective}."),
            grid,
        ],
        width="fluid",
    )


def spec(report: Any) -> dict:
    """The report's JSON spec (what `save()` would upload)."""
    return report._to_model().model_dump(by_alias=True, exclude_none=True, mode="json")


def online() -> bool:
    mode = os.environ.get("WANDB_MODE", "")
    return bool(os.environ.get("WANDB_API_KEY")) and mode not in ("offline", "disabled", "dryrun")


def publish(sweep: Sweep, *, entity: str | None, project: str) -> str:
    """Save the report to wandb and return its URL, or say why it was not (offline)."""
    if not online():
        return "wandb is offline (no WANDB_API_KEY): wandb report not built; the HTML report is the record"
    if not entity:
        import wandb

        entity = wandb.Api().default_entity
    report = build(sweep, entity=str(entity), project=project)
    report.save()
    return f"wandb report: {report.url}"
