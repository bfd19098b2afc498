"""Algorithms are registered specs: an algorithm registered from outside rlexp (here, a copy of grpo's spec under a
new name) is checked, estimated and shown by `rlexp --cfg job` without any other file knowing it, and no generic
code branches on an algorithm's name."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from rlexp.algorithms import registry
from rlexp.checks import check_config
from rlexp.errors import ConfigError
from rlexp.estimates.cost import estimate_cost
from rlexp.estimates.flops import step_flops
from rlexp.estimates.memory import estimate_memory
from tests.helpers import REPO, compose_conf

NAME = "grpo_test"
REGISTER = f"""
import dataclasses, sys
from rlexp.algorithms import grpo, registry
registry.register(dataclasses.replace(grpo.SPEC, name={NAME!r}))
from rlexp.__main__ import entry
sys.argv = ["rlexp", *sys.argv[1:]]
entry()
"""


@pytest.fixture
def test_algorithm() -> Iterator[registry.AlgorithmSpec]:
    from rlexp.algorithms import grpo

    spec = registry.register(dataclasses.replace(grpo.SPEC, name=NAME))
    yield spec
    registry.unregister(NAME)


def test_the_builtin_algorithms_are_the_modules_of_the_package() -> None:
    assert list(registry.algorithms()) == ["grpo", "dapo", "drgrpo", "gspo", "ppo", "opd"]


def test_a_registered_algorithm_is_checked_and_estimated_like_the_one_it_copies(test_algorithm) -> None:
    ours, theirs = compose_conf([f"trainer.algorithm={NAME}"]), compose_conf()
    assert check_config(ours) == check_config(theirs)  # every rule asked of the spec; the same memory fit
    assert estimate_memory(ours) == estimate_memory(theirs)
    assert estimate_cost(ours) == estimate_cost(theirs)
    assert step_flops(ours, 4.0) == step_flops(theirs, 4.0)
    with pytest.raises(ConfigError, match="GRPO needs >= 2"):  # the copy has grpo's rules
        check_config(compose_conf([f"trainer.algorithm={NAME}", "trainer.num_generations=1"]))
    with pytest.raises(ConfigError, match="dapo's key: set trainer=dapo"):  # and no other algorithm's keys
        check_config(compose_conf([f"trainer.algorithm={NAME}", "trainer.dapo.epsilon_high=0.28"]))


def test_an_unknown_algorithm_is_refused_naming_the_registered_ones(test_algorithm) -> None:
    with pytest.raises(ConfigError, match=f"use one of grpo, dapo, drgrpo, gspo, ppo, opd, {NAME}"):
        check_config(compose_conf(["trainer.algorithm=reinforce"]))


def test_cfg_job_shows_an_algorithm_registered_outside_rlexp() -> None:
    args = ["--cfg", "job", f"trainer.algorithm={NAME}", "trainer.beta=null"]
    out = subprocess.run([sys.executable, "-c", REGISTER, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().endswith(
        f"{NAME} needs a KL coefficient: use 0 for none, e.g. 0.04"
    )
    out = subprocess.run([sys.executable, "-c", REGISTER, *args[:-1]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"algorithm: {NAME}" in out.stdout


def test_registering_a_taken_name_is_refused(test_algorithm) -> None:
    from rlexp.algorithms import ppo

    with pytest.raises(ValueError, match="registered twice"):
        registry.register(dataclasses.replace(ppo.SPEC, name=NAME))


def test_a_moved_key_is_refused_naming_its_new_place() -> None:
    from rlexp.config.keys import moved_to

    assert moved_to("trainer.epsilon_high") == "trainer.dapo.epsilon_high"
    assert moved_to("+trainer.overlong.penalty") == "trainer.dapo.overlong.penalty"
    assert moved_to("trainer.epsilon") is None


NAMES = "grpo|dapo|drgrpo|gspo|ppo|opd"
# `t.algorithm == "ppo"`, `algorithm not in ("grpo", ...)`, `NO_KL`-style tuples, `== "dapo"` compared anywhere
ALGORITHM_BRANCH = re.compile(
    rf"algorithm\s*(==|!=)|algorithm\s+(not\s+)?in\s*([(\[{{]|[A-Z_]+\b)|(==|!=)\s*[\"']({NAMES})[\"']"
)


def test_no_code_branches_on_an_algorithm_name() -> None:
    """Only an algorithm's own module knows it; everything else asks the spec (rlexp.algorithms.algorithm_of)."""
    hits = []
    for path in sorted((REPO / "rlexp").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if ALGORITHM_BRANCH.search(line):
                hits.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert not hits, "branches on an algorithm (ask rlexp.algorithms.registry.algorithm_of instead):\n" + "\n".join(
        hits
    )
