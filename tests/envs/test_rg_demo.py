"""experiment=rg_demo (the embedded environments demo): tiny_rg on three reasoning-gym tasks at once learns on
2 CPU cores in under 3 minutes, mean pass@1 over the tasks up by >= 0.15; the run's report has a panel per task.

"3 minutes on 2 cores" is checked as the command's CPU time (user + system of the process tree, at most 2 x 180 s):
the suite runs beside other tests, whose load stretches wall time but not the work the run does."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import pytest

from tests.helpers import run_rlexp

TASKS = ("chain_sum", "products", "letter_counting")


def mean_pass(evals: dict, when: str) -> float:
    return sum(evals[when][f"{t}/pass_at_1"] for t in TASKS) / len(TASKS)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.slow
def test_rg_demo_learns_every_task_mix_in_three_minutes(tmp_path: Path) -> None:
    before_cpu = _children_cpu_s()
    run_rlexp("experiment=rg_demo", "logger=none", f"hydra.run.dir={tmp_path}", check=True, timeout=600)
    cpu = _children_cpu_s() - before_cpu
    evals = json.loads((tmp_path / "evals.json").read_text())
    before, after = mean_pass(evals, "before"), mean_pass(evals, "after")
    assert after - before >= 0.15, (before, after)
    assert cpu <= 2 * 180, cpu
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {f"env/{t}/reward_mean" for t in TASKS} <= set(rows[-1])
    out = tmp_path / "report.html"
    run_rlexp(str(tmp_path), "--out", str(out), module="rlexp.report", check=True)
    html = out.read_text()
    assert all(f'data-task="{t}"' in html for t in TASKS)
