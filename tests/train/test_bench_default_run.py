"""`benchmarks/bench_default_run.py` stays runnable: one short `python -m rlexp` timed as the benchmark times it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO, SHORT, load_benchmark

pytestmark = pytest.mark.slow


def test_benchmark_times_the_users_command(tmp_path: Path) -> None:
    bench = load_benchmark("bench_default_run")
    m = bench.run_once(REPO, tmp_path / "cache", tmp_path / "run", SHORT)
    assert m["wall_s"] > 0 and m["cpu_s"] > 0 and m["rss_gb"] > 0.1  # the child's own peak RSS, not this process's
    assert 0 <= m["pass_before"] <= 1 and 0 <= m["pass_after"] <= 1
    assert any((tmp_path / "cache").iterdir())  # the run compiled into the benchmark's own cache
    assert 1 < m["step_ms"] < m["train_wall_s"] * 1e3 / 3  # median of steps 6-8, below a third of the run


def test_baseline_side_is_a_worktree_of_the_commit(tmp_path: Path) -> None:
    """--baseline REV runs REV's package from a detached worktree (`python -m rlexp` imports it from the cwd)."""
    bench = load_benchmark("bench_default_run")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    tree = bench.worktree("HEAD", tmp_path / "baseline")
    try:
        at = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        assert at.stdout == head.stdout
        assert (tree / "rlexp" / "__main__.py").is_file() and (tree / "conf" / "config.yaml").is_file()
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True)
    assert not tree.exists()
