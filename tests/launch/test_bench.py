"""The sweep benchmarks stay runnable (small sweeps; the 1,000-job runs are `benchmarks/bench_manifests.py` and
`benchmarks/bench_sweep_cli.py`)."""

from __future__ import annotations

from tests.helpers import load_benchmark


def test_benchmark_renders_a_small_sweep() -> None:
    bench = load_benchmark("bench_manifests")
    seconds, written = bench.run(20, "gemma4_e4b", "v6e-32")
    assert written == 20 and seconds > 0


def test_cli_benchmark_runs_the_users_command() -> None:
    bench = load_benchmark("bench_sweep_cli")
    timing = bench.run(3)
    assert timing.wall > timing.floor > 0 and timing.user > 0


def test_the_filesystem_floor_rewrites_what_the_run_wrote(tmp_path) -> None:
    bench = load_benchmark("bench_sweep_cli")
    (tmp_path / "run" / "a" / ".hydra").mkdir(parents=True)
    (tmp_path / "run" / "a" / ".hydra" / "c.yaml").write_text("x: 1\n")
    (tmp_path / "run" / "top.json").write_text("{}")
    tree = bench._snapshot(tmp_path / "run")
    (tmp_path / "out").mkdir()
    assert bench._rewrite(tree, tmp_path / "out") > 0
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*"))
    assert written == ["a", "a/.hydra", "a/.hydra/c.yaml", "top.json"]
    assert (tmp_path / "out" / "a" / ".hydra" / "c.yaml").read_text() == "x: 1\n"


def test_sandbox_benchmark_dry_mode_prints_both_commands(capsys) -> None:  # noqa: ANN001
    bench = load_benchmark("bench_sandbox")
    assert bench.parse_args(["--rounds", "3", "trainer.max_steps=8"]).rounds == 3
    assert bench.main(["--dry"]) == 0
    out = capsys.readouterr().out
    assert "CPU: " in out and "flags: " in out and "reward=code" in out and "reward=arith" in out
