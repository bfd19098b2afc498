"""The report's environment panels: one chart per environment task of the runs (env=..., docs/envs.md).

A run with an environment logs, per task, `env/<task>/reward_mean`, `env/<task>/errors` and
`env/<task>/latency_mean_s` each step and `eval/<task>/pass_at_1` at each eval (rlexp.envs). Each task gets one
figure: every run's reward curve (smoothed) and its eval pass@1 (dotted, one point per eval), with each run's
pass@1 first -> last, its errors and its mean scoring latency under the caption. Runs without an env: no panel.
"""

from __future__ import annotations

import re

from rlexp.report.html import Line, esc, finite, fmt, plot
from rlexp.report.load import Run, Sweep

_TASK = re.compile(r"^env/(.+)/(reward_mean|errors|latency_mean_s)$")


def task_names(runs: list[Run]) -> list[str]:
    """The env tasks any run logged, sorted."""
    return sorted({m.group(1) for r in runs for k in r.metric_names() if (m := _TASK.match(k))})


def _note(run: Run, task: str) -> str:
    passes = [v for _, v in run.series(f"eval/{task}/pass_at_1")]
    errors = sum(v for _, v in run.series(f"env/{task}/errors"))
    latency = [v for _, v in run.series(f"env/{task}/latency_mean_s")]
    cells = [f"pass@1 {fmt(passes[0])} → {fmt(passes[-1])}" if passes else "no eval"]
    cells.append(f'<span class="warn">errors {errors:g}</span>' if errors else "errors 0")
    if latency:
        cells.append(f"latency {sum(latency) / len(latency) * 1e3:.2g} ms")
    return f"{esc(run.name)}: " + ", ".join(cells)


def task_panel(task: str, runs: list[Run], colors: dict[str, str]) -> str:
    """One task's figure (class env-task, data-task); curves carry data-run and data-series (reward, pass_at_1)."""
    lines = []
    for r in runs:
        for series, metric, smooth, cls in (
            ("reward", f"env/{task}/reward_mean", True, "curve"),
            ("pass_at_1", f"eval/{task}/pass_at_1", False, "curve offline"),
        ):
            if pts := finite(r.series(metric)):
                attrs = f'data-run="{esc(r.dir)}" data-series="{series}"'
                lines.append(Line(pts, colors[r.dir], attrs, f"{r.name} {series}", smooth, cls))
    notes = " · ".join(_note(r, task) for r in runs if any(k.startswith(f"env/{task}/") for k in r.metric_names()))
    head = (
        f'<figure class="chart env-task" data-task="{esc(task)}"><figcaption>{esc(task)}: reward '
        f"(solid) and eval pass@1 (dotted)<br><small>{notes}</small></figcaption>"
    )
    body = plot(lines, f"task {task}") if lines else '<p class="empty">no data</p>'
    return head + body + "</figure>"


def env_panels(sweep: Sweep, colors: dict[str, str]) -> str:
    """The section of per-task panels, or "" when no run has an environment."""
    tasks = task_names(sweep.runs)
    if not tasks:
        return ""
    panels = "".join(task_panel(t, sweep.runs, colors) for t in tasks)
    return f'<h2>Environments, one panel per task</h2><div class="charts" id="envs">{panels}</div>'
