"""Random kills, not chosen ones: the default run, reward=judge against a loopback judge, the tool demo, a 3-job
sweep and `rlexp eval`, each killed (SIGKILL or SIGTERM) at moments drawn from a fixed seed over its measured
duration, resumed by the same command, killed again, ... until it completes (tests/faults.py). Every chain must end
equal to its uninterrupted run bit for bit (wall-clock values aside: tests.faults.WALL_CLOCK), with each metrics
row once, no temp file and no process left running.

One test a workload, so that pytest-xdist's workers share the campaign; each computes its workload's uninterrupted
run once and compares every chain with it. Each prints its figures, and the session's summary adds them up
(tests/e2e/conftest.py): the kills (>= 30 in all) and the equal resumes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import campaign, excluded_keys, timed_reference, workloads
from tests.rewards.judge_servers import FaultServer

pytestmark = pytest.mark.slow

SEED = 42  # workload i draws its moments from SEED + i
# kills a workload: 30 in all, fewer where an invocation costs more (the sweep runs three jobs, eval trains first)
KILLS = {"default": 8, "judge": 7, "tools": 6, "sweep": 5, "eval": 4}
BUDGET = 7  # kills at most in one chain (an attempt that ends before its moment ends the chain early)


@pytest.mark.parametrize("name", list(KILLS))
def test_random_kills_resume_to_the_uninterrupted_runs_numbers(
    name: str, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    server = FaultServer()
    try:
        every = {w.name: w for w in workloads(tmp_path, server.url("graded"))}
        if name == "eval":  # rlexp eval evaluates a trained run: the default workload's, uninterrupted
            (tmp_path / "default").mkdir()
            timed_reference(every["default"], tmp_path / "default" / "reference")
        seed = SEED + list(KILLS).index(name)
        result = campaign([every[name]], tmp_path, KILLS[name], seed, budget=BUDGET)
    finally:
        server.shutdown()
    record_property("random_kills", result.figures())
    print(f"{name}, seed {seed}: {result.line()}")
    if name == "default":
        print("wall-clock keys left out:", ", ".join(excluded_keys(tmp_path / "default" / "reference")))
    assert result.kills >= KILLS[name]
    bad = [f"{c.workload}: {'; '.join(c.problems)}" for c in result.chains if not c.equal]
    assert not bad, f"seed {seed}: " + "\n".join(bad)


def test_the_campaign_puts_thirty_kills_into_every_workload_kind() -> None:
    assert sum(KILLS.values()) >= 30 and set(KILLS) == {w.name for w in workloads(Path("."), "")}
