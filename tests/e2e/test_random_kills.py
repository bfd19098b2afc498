"""Random kills, not chosen ones: the default run, reward=judge against a loopback judge, the tool demo, a 3-job
sweep and `rlexp eval`, each killed (SIGKILL or SIGTERM) at moments drawn from a fixed seed over its measured
duration, resumed by the same command, killed again, ... until it completes (tests/faults.py). Every chain must end
equal to its uninterrupted run bit for bit (wall-clock values aside: tests.faults.WALL_CLOCK), with each metrics
row once, no temp file and no process left running.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import campaign, excluded_keys, workloads
from tests.rewards.judge_servers import FaultServer

pytestmark = pytest.mark.slow

# CI's share: 2 kills in each of the five workloads (the suite's time budget); the 30-and-more campaign of the same
# engine is benchmarks/bench_random_kills.py (its figures: benchmarks/README.md)
SEED, KILLS = 42, 10


def test_random_kills_resume_to_the_uninterrupted_runs_numbers(tmp_path: Path) -> None:
    server = FaultServer()
    try:
        result = campaign(workloads(tmp_path, server.url("graded")), tmp_path, KILLS, SEED, budget=2)
    finally:
        server.shutdown()
    print(result.line())
    print("wall-clock keys left out:", ", ".join(excluded_keys(tmp_path / "default" / "reference")))
    assert result.kills >= KILLS
    bad = [f"{c.workload}: {'; '.join(c.problems)}" for c in result.chains if not c.equal]
    assert not bad, f"seed {SEED}: " + "\n".join(bad)
