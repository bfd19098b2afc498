"""JobSet names: deterministic, DNS-safe, unique in a sweep, at most 22 characters."""

from __future__ import annotations

import itertools

import pytest

from rlexp.errors import RlexpError
from rlexp.launch.names import DNS_1035, job_name, unique_names


def test_names_are_short_dns_safe_and_deterministic() -> None:
    n = job_name("Gemma4_E4B-OpenMath-grpo", ["trainer.learning_rate=3e-06", "seed=1"])
    assert len(n) <= 22 and DNS_1035.match(n)
    assert n == job_name("Gemma4_E4B-OpenMath-grpo", ["seed=1", "trainer.learning_rate=3e-06"])  # order-free
    assert n != job_name("Gemma4_E4B-OpenMath-grpo", ["trainer.learning_rate=3e-06", "seed=2"])
    assert job_name("7b-run", []).startswith("r7b")  # must start with a letter
    assert len(job_name("x" * 100, ["a=1"], prefix="my prefix!")) <= 22


def test_unique_over_a_large_sweep() -> None:
    grid = list(itertools.product(range(10), ["1e-6", "3e-6", "1e-5"], ["0", "0.04"], ["grpo", "dapo"], range(9)))
    names = {
        job_name("gemma4-e4b-openmath-grpo", [f"seed={a}", f"lr={b}", f"beta={c}", f"t={d}", f"x={e}"])
        for a, b, c, d, e in grid
    }
    assert len(names) == len(grid) == 1080


def test_duplicate_names_in_a_sweep_are_refused() -> None:
    with pytest.raises(RlexpError, match="both map to JobSet"):
        unique_names(["a-1", "a-1"], [["seed=1"], ["seed=1"]])
