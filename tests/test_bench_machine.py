"""Benchmarks say where their figures hold: the CPU model, the load before and after, and a flag when other work
shared the cores (benchmarks/machine.py), printed by the command a user runs."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, load_benchmark

ZEN4 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"


def test_cpu_model_names_family_and_model() -> None:
    machine = load_benchmark("machine")
    assert machine.cpu_model(ZEN4).startswith("AMD EPYC (family 25, model 17), ")


def test_a_quiet_machine_is_not_flagged_and_a_busy_one_is() -> None:
    machine = load_benchmark("machine")
    quiet = machine.LoadWatch(before=0.1, cores=2)
    assert quiet.contended(2.0) is None  # the benchmark's own process loading both cores
    assert "quiet" in quiet.report(after=1.9) and "CONTENDED" not in quiet.report(after=1.9)
    busy_before = machine.LoadWatch(before=2.5, cores=2)
    assert "before the runs" in busy_before.contended(2.0)
    assert "CONTENDED" in busy_before.report(after=2.0)
    busy_during = machine.LoadWatch(before=0.2, cores=2)
    assert "after the runs" in busy_during.contended(4.0)


def test_a_benchmark_prints_cpu_and_load_as_the_user_runs_it() -> None:
    out = subprocess.run(
        [sys.executable, "benchmarks/bench_manifests.py", "--jobs", "10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("CPU: ") and "cores" in lines[0]
    assert lines[1].startswith("load average before: ")
    assert any(line.startswith("load average before ") and "after" in line for line in lines[-2:])
