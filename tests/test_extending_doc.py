"""docs/extending.md's examples run as written: its reward module registers a reward that the config checks and a
scorer accept, its algorithm module registers an algorithm that the checks, the estimates and a discovered spec
module take like a builtin one (rlexp.discover finds a module by its `SPEC = register(`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlexp.errors import ConfigError
from tests.helpers import REPO, compose_conf

DOC = (REPO / "docs" / "extending.md").read_text()


def block(first_line: str) -> str:
    """The ```python block of the doc that starts with `first_line`."""
    for code in re.findall(r"```python\n(.*?)```", DOC, re.S):
        if code.startswith(first_line):
            return code
    raise AssertionError(f"docs/extending.md has no python block starting {first_line!r}")


def test_the_reward_example_registers_a_checked_reward() -> None:
    from rlexp.rewards import registry

    exec(compile(block("# rlexp/rewards/length.py"), "length.py", "exec"), {})
    try:
        registry.check_kwargs("length_close", {"target": 10}, "reward.functions[0].kwargs")
        with pytest.raises(ConfigError, match="target"):
            registry.check_kwargs("length_close", {"target": 0}, "reward.functions[0].kwargs")
        fn = registry.make_reward_fn("length_close", {"target": 4})
        assert fn(["1+1="], ["2222", "22"]) == [1.0, 0.5]
    finally:
        registry._FACTORIES.pop("length_close", None)
        registry._CHECKS.pop("length_close", None)


def test_the_algorithm_example_is_a_spec_module(tmp_path: Path) -> None:
    from rlexp.algorithms import registry
    from rlexp.checks import check_config
    from rlexp.discover import DECLARES_SPEC
    from rlexp.estimates.memory import estimate_memory

    code = block("# rlexp/algorithms/my_algo.py")
    assert DECLARES_SPEC.search(code)  # what rlexp.discover looks for in rlexp/algorithms/
    exec(compile(code, "my_algo.py", "exec"), {})
    try:
        ours = compose_conf(["trainer.algorithm=my_algo"])
        assert check_config(ours) == check_config(compose_conf())
        assert estimate_memory(ours) == estimate_memory(compose_conf())
        with pytest.raises(ConfigError, match="GRPO needs >= 2"):  # check_groups, as the example declares
            check_config(compose_conf(["trainer.algorithm=my_algo", "trainer.num_generations=1"]))
    finally:
        registry.unregister("my_algo")
