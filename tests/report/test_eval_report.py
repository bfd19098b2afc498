"""The report's eval section: pass@k over steps per k and run, before/after per metric, rlexp.eval results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.report.__main__ import main
from tests.report.browser import open_report


def _run(root: Path, name: str, shift: float, offline: bool) -> Path:
    d = root / name
    (d / "eval").mkdir(parents=True)
    rows = [{"step": s, "rewards/sum": 0.1 * s, "eval/pass_at_1": shift + 0.1 * s, "eval/pass_at_4": shift + 0.2 * s}
            for s in (0, 2, 4)]  # fmt: skip
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = {"accuracy": 0.25, "partial_accuracy": 0.5, "format_accuracy": 0.75, "mean_reward": 0.3, "step": 0}
    after = {**before, "accuracy": 0.5, "partial_accuracy": 0.625, "step": 4}
    summary = {"run_name": name, "status": "completed", "eval": {"before": before, "after": after}}
    (d / "summary.json").write_text(json.dumps(summary))
    if offline:  # what python -m rlexp.eval writes, at steps 2 and 6
        for step in (2, 6):
            metrics = {"correct": 3, "total": 8, "accuracy": 0.375, "pass_at_1": 0.3, "pass_at_4": 0.6, "maj_at_4": 0.4}
            record = {"name": f"gsm8k-step{step}", "step": step, "dataset": "gsm8k", "eval_strategy": "greedy",
                      "metrics": metrics}  # fmt: skip
            (d / "eval" / f"gsm8k-step{step}.json").write_text(json.dumps(record))
    return d


@pytest.mark.slow
def test_report_plots_pass_at_k_per_k_and_run_in_chromium(tmp_path: Path) -> None:
    runs = [_run(tmp_path, "a", 0.1, offline=True), _run(tmp_path, "b", 0.2, offline=False)]
    out = tmp_path / "report.html"
    assert main([*map(str, runs), "--out", str(out)]) == 0
    page = open_report(out)
    assert page.errors == []
    # two runs' training curves, and run a's rlexp.eval results as a line of their own
    assert page.curves["pass_at_k/1"] == page.curves["pass_at_k/4"] == 3
    text = out.read_text()
    assert text.count('class="curve offline"') == 2  # one per k
    assert text.count('<tr class="eval-result"') == 2
    assert "<td>partial_accuracy</td><td>0.5</td><td>0.625</td><td>+0.125</td>" in text
    assert "<td>format_accuracy</td><td>0.75</td><td>0.75</td>" in text
