"""The agent group: the default is single-turn, and each bad input ends in one line naming the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp.checks import check_config
from rlexp.config.agent_rules import tool_format
from rlexp.errors import ConfigError
from tests.helpers import compose_conf, run_rlexp

TOOLS = ["agent=tools", "chat_template=chatml"]
# (overrides, the key the error names, words of the fix)
BAD = [
    ([*TOOLS, "agent.max_turns=0"], "agent.max_turns", "at least 1 model turn"),
    ([*TOOLS, "agent.tools=[{name: abacus}]"], "agent.tools[0].name", "use one of add, calculator, http, python"),
    (["agent=tools", "chat_template=gemma", "agent.tool_format=qwen"], "agent.tool_format", "chat_template=chatml"),
    (["agent=tools", "chat_template=llama3"], "agent.tool_format", "has no tool-call format"),
    ([*TOOLS, "agent.tool_format=json"], "agent.tool_format", "one of qwen, gemma, harmony"),
    ([*TOOLS, "agent.tools=[]"], "agent.tools", "at least one tool"),
    ([*TOOLS, "agent.max_turn_tokens=99"], "agent.max_turn_tokens", "trainer.max_completion_tokens"),
    ([*TOOLS, "agent.tools=[{name: http}]"], "agent.tools[0].kwargs.url", "endpoint"),
    (["agent.max_turns=3"], "agent.max_turns", "use agent=tools"),
    ([*TOOLS, "trainer=dapo"], "trainer.algorithm", "agent=tools trains with grpo, drgrpo, gspo"),
    ([*TOOLS, "trainer=ppo"], "trainer.algorithm", "agent=tools trains with grpo, drgrpo, gspo"),
    ([*TOOLS, "agent.tool_error_budget=0"], "agent.tool_error_budget", "in (0, 1]"),
    ([*TOOLS, "agent.tool_error_budget=1.5"], "agent.tool_error_budget", "in (0, 1]"),
]


@pytest.mark.parametrize(("overrides", "key", "fix"), BAD, ids=[c[1] + ":" + c[0][-1] for c in BAD])
def test_bad_agent_inputs_are_refused_naming_key_and_fix(overrides, key, fix) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError) as err:
        check_config(compose_conf(overrides))
    assert err.value.key == key
    assert fix in str(err.value)


@pytest.mark.parametrize(("template", "fmt"), [("chatml", "qwen"), ("gemma", "gemma"), ("harmony", "harmony")])
def test_the_format_follows_the_chat_template_and_is_overridable(template, fmt) -> None:  # noqa: ANN001
    cfg = compose_conf(["agent=tools", f"chat_template={template}"])
    check_config(cfg)
    assert tool_format(cfg) == fmt
    plain = compose_conf(["agent=tools", "chat_template=plain", f"agent.tool_format={fmt}"])
    check_config(plain)  # no turn markers: any format's text fits
    assert tool_format(plain) == fmt


def test_the_default_is_single_turn() -> None:
    cfg = compose_conf([])
    assert (cfg.agent.kind, cfg.agent.max_turns, cfg.agent.tools) == ("single_turn", 1, [])


@pytest.mark.slow
def test_the_command_refuses_max_turns_0_in_one_line(tmp_path: Path) -> None:
    # a run dir of its own: Hydra makes it before the refusal, and it is not the clone's outputs/
    proc = run_rlexp("experiment=tools_demo", "agent.max_turns=0", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == ["rlexp: error: agent.max_turns=0: an episode needs at least 1 model turn; use 1 or more"]
