"""`benchmarks/bench_default_run.py` stays runnable: one short `python -m rlexp` timed as the benchmark times it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.helpers import REPO, SHORT

pytestmark = pytest.mark.slow


def test_benchmark_times_the_users_command(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_default_run", REPO / "benchmarks" / "bench_default_run.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    m = bench.run_once(REPO, tmp_path / "cache", tmp_path / "run", SHORT)
    assert m["wall_s"] > 0 and m["cpu_s"] > 0 and m["rss_gb"] > 0.1  # the child's own peak RSS, not this process's
    assert 0 <= m["pass_before"] <= 1 and 0 <= m["pass_after"] <= 1
    assert any((tmp_path / "cache").iterdir())  # the run compiled into the benchmark's own cache
