"""The manifest benchmark stays runnable (a small sweep; the 1,000-job run is `benchmarks/bench_manifests.py`)."""

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
