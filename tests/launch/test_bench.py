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
    timing = bench.run(3)
    assert timing.wall > timing.floor > 0 and timing.user > 0


def test_the_filesystem_floor_rewrites_what_the_run_wrote(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("bench_sweep_cli", REPO / "benchmarks" / "bench_sweep_cli.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (tmp_path / "run" / "a" / ".hydra").mkdir(parents=True)
    (tmp_path / "run" / "a" / ".hydra" / "c.yaml").write_text("x: 1\n")
    (tmp_path / "run" / "top.json").write_text("{}")
    tree = bench._snapshot(tmp_path / "run")
    (tmp_path / "out").mkdir()
    assert bench._rewrite(tree, tmp_path / "out") > 0
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*"))
    assert written == ["a", "a/.hydra", "a/.hydra/c.yaml", "top.json"]
    assert (tmp_path / "out" / "a" / ".hydra" / "c.yaml").read_text() == "x: 1\n"
