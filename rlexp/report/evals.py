"""The report's eval section: pass@k curves over steps per k and run, the before/after table of every eval metric,
and the results `python -m rlexp.eval` wrote into each run's eval/ folder."""

from __future__ import annotations

import re

from rlexp import storage
from rlexp.report.html import Line, esc, finite, fmt, plot
from rlexp.report.load import Run

BEFORE_AFTER = ("accuracy", "partial_accuracy", "format_accuracy", "mean_reward", "greedy_accuracy", "pass_at_1")
RESULT_COLUMNS = ("accuracy", "partial_accuracy", "format_accuracy", "mean_reward")
_PASS_K = re.compile(r"^eval/pass_at_(\d+)$")


def offline_results(run: Run) -> list[dict]:
    """The eval/<name>.json records of a run dir, by step then name."""
    folder = storage.join(run.dir, "eval")
    names = sorted(n for n in storage.list_names(folder) or () if n.endswith(".json"))
    records = [storage.read_json(storage.join(folder, n)) for n in names]
    good = [r for r in records if isinstance(r, dict) and isinstance(r.get("metrics"), dict)]
    return sorted(good, key=lambda r: (r.get("step") is None, r.get("step") or 0, str(r.get("name"))))


def ks(runs: list[Run], results: dict[str, list[dict]]) -> list[int]:
    """Every k some run logged pass@k for, during training or in an rlexp.eval result."""
    found = {int(m.group(1)) for r in runs for name in r.metric_names() if (m := _PASS_K.match(name))}
    for records in results.values():
        found |= {int(k[8:]) for rec in records for k in rec["metrics"] if k.startswith("pass_at_") and k[8:].isdigit()}
    return sorted(found)


def pass_at_k_chart(k: int, runs: list[Run], colors: dict[str, str], results: dict[str, list[dict]]) -> str:
    """pass@k over steps: each run's training-time evals (solid) and its rlexp.eval results at steps (dashed)."""
    lines = []
    for r in runs:
        attrs = f'data-run="{esc(r.dir)}"'
        if pts := finite(r.series(f"eval/pass_at_{k}")):
            lines.append(Line(pts, colors[r.dir], attrs, r.name))
        later = [(int(x["step"]), float(x["metrics"][f"pass_at_{k}"])) for x in results.get(r.dir, [])
                 if isinstance(x.get("step"), int) and isinstance(x["metrics"].get(f"pass_at_{k}"), int | float)]  # fmt: skip
        if pts := finite(sorted(dict(later).items())):
            lines.append(Line(pts, colors[r.dir], attrs, f"{r.name} (rlexp.eval)", cls="curve offline"))
    head = (
        f'<figure class="chart pass-at-k" data-metric="pass_at_k/{k}"><figcaption>eval pass@{k} over steps</figcaption>'
    )
    return head + (plot(lines, f"pass@{k}") if lines else '<p class="empty">no data</p>') + "</figure>"


def before_after_table(runs: list[Run]) -> str:
    """Per run and metric: the eval before training, after it, and the gain (summary.json's eval)."""
    body = []
    for r in runs:
        ev = r.summary.get("eval") or {}
        before, after = ev.get("before") or {}, ev.get("after") or {}
        for m in BEFORE_AFTER:
            b, a = before.get(m), after.get(m)
            if b is None and a is None:
                continue
            gain = a - b if isinstance(a, int | float) and isinstance(b, int | float) else None
            body.append(
                f'<tr data-run="{esc(r.dir)}"><td>{esc(r.name)}</td><td>{esc(m)}</td><td>{fmt(b)}</td>'
                f"<td>{fmt(a)}</td><td>{'–' if gain is None else f'{gain:+.3g}'}</td></tr>"
            )
    if not body:
        return '<p class="sub">No run has evals before and after training.</p>'
    head = "<tr><th>run</th><th>metric</th><th>before</th><th>after</th><th>gain</th></tr>"
    return f'<table id="before-after"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def results_table(runs: list[Run], results: dict[str, list[dict]], pass_ks: list[int]) -> str:
    """The rlexp.eval results of every run: where, on what, with which strategy, and their numbers."""
    cols = [*RESULT_COLUMNS, *(f"pass_at_{k}" for k in pass_ks), *(f"maj_at_{k}" for k in pass_ks)]
    body = []
    for r in runs:
        for x in results.get(r.dir, []):
            m = x["metrics"]
            cells = "".join(f"<td>{fmt(m.get(c))}</td>" for c in cols)
            body.append(
                f'<tr class="eval-result" data-run="{esc(r.dir)}"><td>{esc(r.name)}</td><td>{esc(x.get("name"))}</td>'
                f"<td>{esc(x.get('step'))}</td><td>{esc(x.get('dataset'))}</td><td>{esc(x.get('eval_strategy'))}</td>"
                f"<td>{fmt(m.get('correct'), 6)}/{fmt(m.get('total'), 6)}</td>{cells}</tr>"
            )
    if not body:
        return ""
    head = "".join(f"<th>{esc(c)}</th>" for c in ("run", "name", "step", "dataset", "strategy", "correct", *cols))
    return (
        "<h3>rlexp.eval results</h3>"
        f'<table id="eval-results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def section(runs: list[Run], colors: dict[str, str]) -> str:
    """The whole eval section of the report."""
    results = {r.dir: offline_results(r) for r in runs}
    pass_ks = ks(runs, results)
    charts = "".join(pass_at_k_chart(k, runs, colors, results) for k in pass_ks)
    return (
        "<h2>Evals</h2>"
        + before_after_table(runs)
        + (f'<div class="charts">{charts}</div>' if charts else "")
        + results_table(runs, results, pass_ks)
    )
