"""env=class: the user's class runs in a child process; its tools come from signatures and docstrings; a class
without reset or a tool without a docstring is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp.config.schema import EnvConfig
from rlexp.envs import user_class
from rlexp.errors import ConfigError

FILE = Path(__file__).with_name("counter_env.py")


def env(cls: str) -> EnvConfig:
    return EnvConfig(name="counter", kind="class", target=f"{FILE}:{cls}", timeout_s=30)


def test_tools_from_signature_and_docstring() -> None:
    tools = {t["name"]: t for t in user_class.describe(env("CounterEnv"))}
    assert set(tools) == {"add", "show"}
    assert tools["add"]["description"] == "Add n to the counter."
    assert tools["add"]["parameters"]["properties"]["n"] == {"type": "integer", "description": "how much to add"}
    assert tools["add"]["parameters"]["required"] == ["n"]


def test_an_episode_is_replayed_in_a_child_and_scored_by_get_reward() -> None:
    rows = [{"answer": "5"}, {"answer": "5"}]
    calls = [[["add", {"n": 2}], ["add", {"n": 3}], ["show", {}]], [["add", {"n": 1}], ["nope", {}]]]
    out = user_class.episodes(env("CounterEnv"), rows, calls, reward=True)
    assert out["values"] == [1.0, 0.0] and out["observations"] == ["Reach 5.", "Reach 5."]
    assert out["outputs"][0] == ["2", "5", "5"] and out["outputs"][1][1].startswith("error: AttributeError")


@pytest.mark.parametrize(
    ("cls", "needle"),
    [
        ("NoReset", "has no reset(**row) method"),
        ("Undocumented", "tool method Undocumented.peek has no docstring"),
        ("Missing", "defines no class Missing"),
    ],
)
def test_a_bad_class_is_refused_in_one_line(cls: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        user_class.check(env(cls))
    assert needle in str(err.value) and "\n" not in str(err.value)
