"""The report's environment panels (rlexp/report/env_panels.py): one figure per env task, read back in headless
Chromium as the other report tests do; runs without an environment get none."""

from __future__ import annotations

import json
from pathlib import Path

from rlexp.report.__main__ import main
from rlexp.report.env_panels import task_names
from rlexp.report.load import load
from tests.report.browser import open_report
from tests.report.test_report import FIXTURE

TASKS = ("chain_sum", "letter_counting", "products")


def env_run(root: Path, name: str, lift: float) -> Path:
    """A run dir whose metrics.jsonl has what an env=reasoning_gym run logs per task."""
    run = root / name
    run.mkdir()
    rows = []
    for step in range(0, 41, 4):
        row: dict = {"step": step}
        for k, task in enumerate(TASKS):
            if step:
                row[f"env/{task}/reward_mean"] = 0.1 * k + lift * step / 40
                row[f"env/{task}/errors"] = float(task == "products" and step == 8)
                row[f"env/{task}/latency_mean_s"] = 3e-5
            if step in (0, 40):
                row[f"eval/{task}/pass_at_1"] = 0.1 * k + (lift if step else 0.0)
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps({"run_name": name, "state": "completed"}))
    return run


def test_one_panel_per_task_in_headless_chromium(tmp_path: Path) -> None:
    runs = [env_run(tmp_path, "a", 0.3), env_run(tmp_path, "b", 0.1)]
    assert task_names(load([str(r) for r in runs]).runs) == list(TASKS)
    out = tmp_path / "report.html"
    assert main([*map(str, runs), "--out", str(out)]) == 0
    page = open_report(out)
    assert page.errors == []
    # per task: each run's reward curve and its eval pass@1
    assert page.envs == {task: ["reward", "pass_at_1", "reward", "pass_at_1"] for task in TASKS}
    html = out.read_text()
    assert "a: pass@1 0.1 → 0.4, errors 0," in html  # letter_counting of run a, first -> last eval
    assert '<span class="warn">errors 1</span>' in html  # products' errored step


def test_runs_without_an_environment_have_no_panel(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main([str(FIXTURE), "--out", str(out)]) == 0
    assert 'class="chart env-task"' not in out.read_text()
