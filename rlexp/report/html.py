"""Render a `Sweep` as one self-contained HTML file: inline SVG curves, the ranked table, a health panel.

No external assets (opens offline); a few lines of JS only highlight a run's curves on hover.
"""

from __future__ import annotations

import html
import json
import math
from typing import NamedTuple

from rlexp.report import analyze
from rlexp.report.load import Run, Sweep

PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
)  # fmt: skip
TITLES = {
    analyze.REWARD: "train reward (rewards/sum)",
    analyze.PASS1: "eval pass@1",
    analyze.KL: "KL to reference",
    analyze.LENGTH: "completion length (tokens)",
}
AGENT_CURVES = ("agent/turns_mean", "agent/tool_calls_mean", "agent/tool_errors", "agent/episodes_truncated")
SHORT_NAMES = {analyze.REWARD: "reward", analyze.PASS1: "pass@1", analyze.KL: "KL", analyze.LENGTH: "length"}
STAT_NAMES = {"final": "final", "best": "best", "last10": "last 10 %"}
SMOOTHED = {analyze.REWARD, analyze.KL, analyze.LENGTH}
W, H, ML, MR, MT, MB = 440, 230, 52, 12, 26, 34
MAX_POINTS = 240  # per polyline: keeps a long run's report small without visible loss


def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}g}"


def fmt_ms(xs: list[float], digits: int = 3) -> str:
    m, s = analyze.mean_std(xs)
    if m is None:
        return "–"
    return fmt(m, digits) + (f" ± {fmt(s, 2)}" if s is not None else "")


def ema(values: list[float], alpha: float = 0.3) -> list[float]:
    out, acc = [], None
    for v in values:
        acc = v if acc is None else alpha * v + (1 - alpha) * acc
        out.append(acc)
    return out


def nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def thin(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Every k-th point (always keeping the last) so no polyline exceeds MAX_POINTS."""
    if len(points) <= MAX_POINTS:
        return points
    k = math.ceil(len(points) / MAX_POINTS)
    return points[::k] + ([points[-1]] if (len(points) - 1) % k else [])


class Line(NamedTuple):
    """One curve of a chart: finite (step, value) points, drawn EMA-smoothed over a faint raw line when `smooth`."""

    pts: list[tuple[int, float]]
    color: str
    attrs: str  # data-* attributes its polylines and dots carry
    name: str  # its hover title
    smooth: bool = False
    cls: str = "curve"


def finite(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(s, v) for s, v in points if math.isfinite(v)]


def plot(lines: list[Line], label: str) -> str:
    """The <svg> of non-empty `lines` on shared axes: y ticks and grid, step ticks, one polyline per line."""
    xs = [s for line in lines for s, _ in line.pts]
    ys = [v for line in lines for _, v in line.pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5 * (abs(y0) or 1), y1 + 0.5 * (abs(y1) or 1)
    pad = 0.05 * (y1 - y0)
    y0, y1 = y0 - pad, y1 + pad

    def px(x: float) -> float:
        return ML + (x - x0) / (x1 - x0) * (W - ML - MR)

    def py(y: float) -> float:
        return H - MB - (y - y0) / (y1 - y0) * (H - MT - MB)

    parts = [f'<svg class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{esc(label)}">']
    for t in nice_ticks(y0, y1):
        parts.append(
            f'<line class="grid" x1="{ML}" x2="{W - MR}" y1="{py(t):.1f}" y2="{py(t):.1f}"/>'
            f'<text class="tick" x="{ML - 4}" y="{py(t) + 3:.1f}" text-anchor="end">{fmt(t, 3)}</text>'
        )
    for t in nice_ticks(x0, x1):
        parts.append(f'<text class="tick" x="{px(t):.1f}" y="{H - MB + 14}" text-anchor="middle">{fmt(t, 4)}</text>')
    parts.append(f'<text class="axis" x="{(ML + W - MR) / 2}" y="{H - 4}" text-anchor="middle">step</text>')
    for line in lines:
        pts, color, attrs = line.pts, line.color, line.attrs
        steps, values = [s for s, _ in pts], [v for _, v in pts]
        if line.smooth and len(pts) > 2:
            raw = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in thin(pts))
            parts.append(f'<polyline class="raw" {attrs} points="{raw}" stroke="{color}"/>')
            values = ema(values)
        xy = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in thin(list(zip(steps, values, strict=True))))
        title = f"<title>{esc(line.name)}: final {fmt(values[-1])}</title>"
        parts.append(f'<polyline class="{line.cls}" {attrs} points="{xy}" stroke="{color}">{title}</polyline>')
        if len(pts) <= 12:
            parts += [
                f'<circle class="dot" {attrs} cx="{px(s):.1f}" cy="{py(v):.1f}" r="2.5" fill="{color}"/>'
                for s, v in zip(steps, values, strict=True)
            ]
    parts.append("</svg>")
    return "".join(parts)


def chart(metric: str, runs: list[Run], colors: dict[str, str]) -> str:
    lines = [
        Line(pts, colors[r.dir], f'data-run="{esc(r.dir)}"', r.name, metric in SMOOTHED)
        for r in runs
        if (pts := finite(r.series(metric)))
    ]
    head = (
        f'<figure class="chart" data-metric="{esc(metric)}"><figcaption>{esc(TITLES.get(metric, metric))}</figcaption>'
    )
    if not lines:
        return head + '<p class="empty">no data</p></figure>'
    return head + plot(lines, metric) + "</figure>"


HEALTH_NAMES = {"rpc_error_ratio": "RPC errors", "invalid_ratio": "invalid", "latency_p95_s": "p95 latency"}


def reward_chart(run: Run, label: str) -> str:
    """One run's rewards of a composite on shared axes (the combined one dashed), with each reward's peak RPC-error
    and invalid ratios and p95 latency under the caption: a judge reward parting from a structural one shows here."""
    names = analyze.reward_names(run)
    colors = {n: "#444" if n in analyze.COMBINED else PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    lines = [
        Line(pts, colors[n], f'data-reward="{esc(n)}"', n, True, "curve combined" if n in analyze.COMBINED else "curve")
        for n in names
        if (pts := finite(run.series(f"rewards/{n}/mean")))
    ]
    notes = []
    for n in names:
        cells = []
        for key, peak in analyze.reward_health(run, n).items():
            if key == "latency_p95_s":
                cells.append(f"{HEALTH_NAMES[key]} {fmt(peak, 2)} s")
            elif peak > 0:  # the share health() flags at 10 %
                cells.append(f'<span class="{"warn" if peak >= 0.1 else ""}">{HEALTH_NAMES[key]} {peak:.0%}</span>')
        if cells:
            notes.append(f"{esc(n)}: " + ", ".join(cells))
    health = f"<br><small>peaks: {' · '.join(notes)}</small>" if notes else ""
    legend = "".join(
        f'<li><span class="sw" style="background:{colors[n]}"></span>{esc(n)}'
        + (" <small>(combined)</small>" if n in analyze.COMBINED else "")
        + "</li>"
        for n in names
    )
    return (
        f'<figure class="chart rewards-chart" data-metric="rewards/*/mean" data-run="{esc(run.dir)}">'
        f"<figcaption>rewards of {esc(label)}{health}</figcaption>"
        + plot(lines, f"rewards of {label}")
        + f'<ul class="reward-legend">{legend}</ul></figure>'
    )


def _label(run: Run, keys: list[str]) -> str:
    params = run.params()
    shown = [f"{k.rsplit('.', 1)[-1]}={params.get(k, '')}" for k in keys if k in params]
    return ", ".join(shown) or run.name


def _verdict(sweep: Sweep, ranked: list[analyze.Row], keys: list[str]) -> str:
    best = analyze.best_row(sweep)
    if best is None:
        return '<p class="verdict">No run has an objective yet.</p>'
    m, s = analyze.mean_std(best.values["objective"])
    point = ", ".join(f"{k}={v}" for k, v in best.params.items()) or best.runs[0].name
    text = f"<b>Winner:</b> {esc(point)} — {esc(sweep.objective)} = {fmt_ms(best.values['objective'])}"
    text += f" ({len(best.runs)} run{'s' if len(best.runs) > 1 else ''})"
    if len(ranked) > 1:
        m2, s2 = analyze.mean_std(ranked[1].values["objective"])
        if m2 is not None and m is not None:
            spread = max(x for x in (s, s2, 0.0) if x is not None)
            margin = f"; margin over the runner-up {fmt(abs(m - m2))}"
            if spread > 0:
                margin += f" (≈ {abs(m - m2) / spread:.1f} seed std)"
            elif len(best.runs) == 1:
                margin += " (single seed: no noise estimate)"
            text += margin
    bad = [f for f in best.flags if f.severity == "bad"]
    warn = [f for f in best.flags if f.severity == "warn"]
    honesty = (
        '<span class="ok">no warning signs</span>'
        if not best.flags
        else f'<span class="{"bad" if bad else "warn"}">{len(bad) + len(warn)} health flag(s): '
        + esc("; ".join(f.message for f in best.flags[:3]))
        + "</span>"
    )
    return f'<p class="verdict">{text}. Honest win? {honesty}</p>'


def samples_table(run: Run) -> str:
    """The winner's last logged completions: a reward that is being gamed is usually visible here."""
    rows = run.last_samples()
    if not rows:
        return '<p class="sub">No samples.jsonl in the winning run.</p>'

    def cut(text: object, n: int = 160) -> str:
        text = str(text)
        return esc(text if len(text) <= n else text[: n - 1] + "…")

    def completion(r: dict) -> str:
        if not r.get("conversation"):
            return f"<code>{cut(r.get('completion', ''))}</code>"
        # agent=tools: the episode as a conversation, one line a turn (the model's, or a tool's result)
        return "<br>".join(
            f'<span class="turn">{esc(m["name"] if m["role"] == "tool" else "model")}:</span> <code>{cut(m["content"])}</code>'
            for m in r["conversation"]
        )

    body = "".join(
        f"<tr><td>{cut(r.get('prompt', ''))}</td><td>{completion(r)}</td>"
        f"<td>{cut(r.get('answer', ''))}</td>"
        f"<td>{esc(', '.join(f'{k}={fmt(v, 3)}' for k, v in (r.get('rewards') or {}).items()))}</td></tr>"
        for r in rows
    )
    step = rows[0].get("step")
    return (
        f'<p class="sub">{esc(run.name)}, step {esc(step)}</p><table id="samples"><thead><tr><th>prompt</th>'
        f"<th>completion</th><th>answer</th><th>rewards</th></tr></thead><tbody>{body}</tbody></table>"
    )


def run_colors(sweep: Sweep) -> dict[str, str]:
    return {run.dir: PALETTE[i % len(PALETTE)] for i, run in enumerate(sweep.runs)}


def render(sweep: Sweep, evals: str = "", envs: str = "") -> str:
    """The report's HTML; `evals`: the eval section (rlexp.report.evals), placed after the curves; `envs`: the
    environment tasks' panels (rlexp.report.env_panels), after the composite rewards' charts."""
    colors = run_colors(sweep)
    keys = [k for k in sweep.swept_keys if k not in analyze.SEED_KEYS]
    label_keys = list(sweep.swept_keys)  # curves are per run, so the legend names the seed too
    ranked = analyze.rows(sweep)
    states: dict[str, int] = {}
    for run in sweep.runs:
        states[run.state] = states.get(run.state, 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))

    head_cells = "".join(f"<th>{esc(k)}</th>" for k in keys)
    head_cells += f'<th>runs</th><th class="obj">{esc(sweep.objective)}</th>'
    head_cells += "".join(
        f'<th title="{esc(m)}, {esc(STAT_NAMES[h])}">{esc(SHORT_NAMES.get(m, m))}<br><small>{esc(STAT_NAMES[h])}</small></th>'
        for m, h in analyze.COLUMNS
    )
    head_cells += "<th>health</th><th>state</th>"
    body = []
    for rank, row in enumerate(ranked, 1):
        dirs = " ".join(r.dir for r in row.runs)
        swatches = "".join(f'<span class="sw" style="background:{colors[r.dir]}"></span>' for r in row.runs)
        cells = "".join(f"<td>{esc(v)}</td>" for v in row.params.values()) if keys else ""
        cells += f"<td>{swatches}{len(row.runs)}</td><td class='obj'>{fmt_ms(row.values['objective'])}</td>"
        cells += "".join(f"<td>{fmt_ms(row.values[f'{m}:{h}'])}</td>" for m, h in analyze.COLUMNS)
        sev = "bad" if any(f.severity == "bad" for f in row.flags) else ("warn" if row.flags else "ok")
        cells += f'<td class="{sev}">{len(row.flags) or "ok"}</td>'
        cells += f"<td>{esc(', '.join(sorted({r.state for r in row.runs})))}</td>"
        body.append(f'<tr class="run-row" data-runs="{esc(dirs)}" data-rank="{rank}">{cells}</tr>')

    flags_html = []
    for row in ranked:
        for run in row.runs:
            for flag in analyze.health(run):
                flags_html.append(
                    f'<li class="{flag.severity}" data-run="{esc(run.dir)}"><b>{esc(_label(run, label_keys))}</b> '
                    f"[{esc(flag.code)}] {esc(flag.message)}</li>"
                )
    health_panel = (
        f'<ul class="flags">{"".join(flags_html)}</ul>'
        if flags_html
        else '<p class="ok">No reward-hacking or instability signs in any run.</p>'
    )
    legend = "".join(
        f'<li data-run="{esc(r.dir)}"><span class="sw" style="background:{colors[r.dir]}"></span>'
        f"{esc(_label(r, label_keys))} <small>({esc(r.state)})</small></li>"
        for r in sweep.runs
    )
    curves = analyze.CURVES + tuple(m for m in AGENT_CURVES if any(r.series(m) for r in sweep.runs))
    charts = "".join(chart(m, sweep.runs, colors) for m in curves)
    parts = analyze.reward_chart_runs(sweep, ranked)
    reward_charts = (
        '<h2>Rewards of a composite, one chart per run</h2><div class="charts">'
        + "".join(reward_chart(r, f"{r.name} ({_label(r, label_keys)})") for r in parts)
        + "</div>"
        if parts
        else ""
    )
    best = analyze.best_row(sweep)
    samples = samples_table(best.runs[0]) if best else '<p class="sub">No winner yet.</p>'
    data = {
        "title": sweep.title,
        "objective": sweep.objective,
        "direction": sweep.direction,
        "swept_keys": keys,
        "runs": [
            {"name": r.name, "dir": r.dir, "params": r.params(), "state": r.state, "objective": r.objective}
            for r in sweep.runs
        ],
    }
    payload = json.dumps(data).replace("</", "<\\/")
    return TEMPLATE.format(
        title=esc(sweep.title),
        subtitle=esc(f"{len(sweep.runs)} runs ({counts}) · objective {sweep.objective} ({sweep.direction})"),
        source=esc(sweep.source),
        verdict=_verdict(sweep, ranked, keys),
        head=head_cells,
        body="".join(body),
        health=health_panel,
        legend=legend,
        charts=charts,
        reward_charts=reward_charts + envs,
        evals=evals,
        samples=samples,
        data=payload,
        css=CSS,
        js=JS,
    )


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:20px;margin:0}h2{font-size:16px;margin:22px 0 8px}
.sub{color:#666}.verdict{background:#f4f6fa;padding:10px 12px;border-radius:6px}
table{border-collapse:collapse;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #e3e3e3;text-align:right;white-space:nowrap}
th{background:#fafafa;vertical-align:bottom;white-space:nowrap}td:first-child,th:first-child{text-align:left}
.obj{font-weight:600}.ok{color:#2a7a2a}.warn{color:#b36b00}.bad{color:#c0222b;font-weight:600}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:3px}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{margin:0;border:1px solid #eee;border-radius:6px;padding:4px}
figcaption{font-weight:600;font-size:13px;padding:2px 6px}
.plot .grid{stroke:#eee}.plot .tick,.plot .axis{font-size:10px;fill:#777}
.plot polyline{fill:none}.plot .curve{stroke-width:2}.plot .raw{stroke-width:1;opacity:.2}
.plot .combined{stroke-dasharray:5 3}.plot .offline{stroke-dasharray:2 3}.rewards-chart{max-width:450px}figcaption small{font-weight:400}
.reward-legend{list-style:none;padding:0 6px;margin:2px 0;display:flex;gap:4px 12px}
.plot .dim{opacity:.08}.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:4px 14px}
.flags li{margin:2px 0}tr.hl td{background:#fff6d6}#samples td{text-align:left;white-space:normal;max-width:420px}
"""

JS = """
(function(){
  function hl(runs,on){
    var set=runs?runs.split(' '):[];
    document.querySelectorAll('.plot [data-run]').forEach(function(el){
      el.classList.toggle('dim',on&&set.indexOf(el.getAttribute('data-run'))<0);});
  }
  document.querySelectorAll('tr.run-row,.legend li').forEach(function(el){
    var runs=el.getAttribute('data-runs')||el.getAttribute('data-run');
    el.addEventListener('mouseenter',function(){hl(runs,true);el.classList.add('hl');});
    el.addEventListener('mouseleave',function(){hl(runs,false);el.classList.remove('hl');});
  });
})();
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rlexp report: {title}</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{css}</style></head>
<body>
<h1>rlexp sweep report: {title}</h1>
<p class="sub">{subtitle}<br><small>{source}</small></p>
{verdict}
<h2>Runs ranked by the objective</h2>
<table id="runs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<h2>Health</h2>
<div id="health">{health}</div>
<h2>Curves</h2>
<ul class="legend">{legend}</ul>
<div class="charts">{charts}</div>
{reward_charts}
{evals}
<h2>Samples from the winner</h2>
{samples}
<script type="application/json" id="rlexp-data">{data}</script>
<script>{js}</script>
</body></html>
"""
