"""The sweep benchmarks stay runnable (small sweeps; the 1,000-job runs are `benchmarks/bench_manifests.py` and
`benchmarks/bench_sweep_cli.py`)."""

from __future__ import annotations

import importlib.util

from tests.helpers import REPO


def test_benchmark_renders_a_small_sweep() -> None:
    spec = importlib.util.spec_from_file_location("bench_manifests", REPO / "benchmarks" / "bench_manifests.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seconds, written = bench.run(20, "gemma4_e4b", "v6e-32")
    assert written == 20 and seconds > 0


def test_cli_benchmark_runs_the_users_command() -> None:
    spec = importlib.util.spec_from_file_location("bench_sweep_cli", REPO / "benchmarks" / "bench_sweep_cli.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    wall, cpu = bench.run(3)
    assert wall > 0 and cpu > 0
