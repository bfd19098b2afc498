"""Random kills, not chosen ones: the default run, reward=judge against a loopback judge, the tool demo, a 3-job
sweep and `rlexp eval`, each killed (SIGKILL or SIGTERM) at moments drawn from a fixed seed over its measured CPU
duration, resumed by the same command, killed again, ... until it completes (tests/faults.py). Every chain must end
equal to its uninterrupted run bit for bit (wall-clock values aside: tests.faults.WALL_CLOCK), with each metrics
row once, no temp file and no process left running.

One test a workload, so that pytest-xdist's workers share the campaign, except `rlexp eval`, which evaluates the
default workload's uninterrupted run and so shares its test (one training run instead of two); each computes its
workloads' uninterrupted runs once and compares every chain with them. Each prints its figures, and the session's
summary adds them up (tests/e2e/conftest.py): the kills (>= 30 in all) and the equal resumes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import campaign, excluded_keys, workloads
from tests.rewards.judge_servers import FaultServer

pytestmark = pytest.mark.slow

SEED = 42  # workload i draws its moments from SEED + i
# kills a workload: 30 in all, fewer where an invocation costs more (the sweep runs three jobs: ~10 CPU-s an
# invocation, the default run ~6)
KILLS = {"default": 10, "judge": 7, "tools": 6, "sweep": 3, "eval": 4}
BUDGET = max(KILLS.values())  # kills at most in one chain: a workload's all (an attempt that ends first ends it)
TESTS = {"default+eval": ["default", "eval"], "judge": ["judge"], "tools": ["tools"], "sweep": ["sweep"]}


@pytest.mark.parametrize("names", list(TESTS.values()), ids=list(TESTS))
def test_random_kills_resume_to_the_uninterrupted_runs_numbers(
    names: list[str], tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    server = FaultServer()
    results = {}
    try:
        every = {w.name: w for w in workloads(tmp_path, server.url("graded"))}
        for name in names:  # in order: eval's chains copy the default workload's reference (tests.faults.workloads)
            seed = SEED + list(KILLS).index(name)
            results[name] = (seed, campaign([every[name]], tmp_path, KILLS[name], seed, budget=BUDGET))
    finally:
        server.shutdown()
    figures = [result.figures() for _, result in results.values()]
    record_property("random_kills", {**{k: sum(f[k] for f in figures) for k in figures[0]}, "workloads": len(names)})
    for name, (seed, result) in results.items():
        print(f"{name}, seed {seed}: {result.line()}")
    if "default" in names:
        print("wall-clock keys left out:", ", ".join(excluded_keys(tmp_path / "default" / "reference")))
    bad = [
        f"{c.workload} (seed {seed}): {'; '.join(c.problems)}"
        for seed, result in results.values()
        for c in result.chains
        if not c.equal
    ]
    assert not bad, "\n".join(bad)
    assert all(result.kills >= KILLS[name] for name, (_, result) in results.items())


def test_the_campaign_puts_thirty_kills_into_every_workload_kind() -> None:
    assert sum(KILLS.values()) >= 30 and set(KILLS) == {w.name for w in workloads(Path("."), "")}
    assert sorted(n for names in TESTS.values() for n in names) == sorted(KILLS)  # each workload in one test
