"""Load runs and write the HTML report (used by the CLI and by the end-of-sweep callback)."""

from __future__ import annotations

from rlexp import storage
from rlexp.report import env_panels, evals, html
from rlexp.report.load import Sweep, load


def default_out(inputs: list[str]) -> str:
    """<sweep dir>/report.html for one sweep dir, else ./report.html."""
    if len(inputs) == 1 and storage.exists(storage.join(inputs[0], "sweep.json")):
        return storage.join(inputs[0], "report.html")
    return "report.html"


def write_report(inputs: list[str], out: str | None = None, *, objective: str | None = None) -> str:
    sweep = load(inputs, objective=objective)
    return write_sweep(sweep, out or default_out(inputs))


def write_sweep(sweep: Sweep, out: str) -> str:
    colors = html.run_colors(sweep)
    # env=...: one panel per task, after the composite rewards' charts
    page = html.render(sweep, evals.section(sweep.runs, colors), envs=env_panels.env_panels(sweep, colors))
    storage.write_text(out, page)
    return out
