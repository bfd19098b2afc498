"""env=class trains end to end through the user's command: a two-tool user class (tests/envs/calc_env.py) in place
of the tools demo's calculator; episode i's calls reach episode i's instance (a child process replays them), and
get_reward() is the reward. The class's tools are offered in the chat template's tool format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp import envs
from tests.helpers import REPO, compose_conf, run_rlexp

TARGET = f"{REPO / 'tests' / 'envs' / 'calc_env.py'}:CalcEnv"


def test_the_class_tools_are_offered_in_the_tool_format() -> None:
    conf = envs.resolve(compose_conf(["env=class", f"env.target={TARGET}", "chat_template=chatml"]))
    assert conf.agent.kind == "tools" and conf.agent.tools == [] and conf.reward.functions[0].fn == "env_class"
    prompt = envs.tools_prompt(conf)
    assert "<tools>" in prompt  # Qwen's (ChatML's) format, as rlexp.tools.formats renders it
    specs = [json.loads(line) for line in prompt.splitlines() if line.startswith('{"type": "function"')]
    assert [s["function"]["name"] for s in specs] == ["calculator", "show"]
    assert specs[0]["function"]["parameters"]["properties"]["expression"]["description"] == "numbers joined by + or -"


@pytest.mark.slow
def test_a_two_tool_class_trains_through_the_command(tmp_path: Path) -> None:
    run_rlexp(
        "experiment=tools_demo", "env=class", f"env.target={TARGET}", "trainer.max_steps=2", "trainer.eval_prompts=8",
        "trainer.eval_samples=1", "trainer.eval_every=2", "trainer.checkpoint_every=2", "logger=none",
        f"hydra.run.dir={tmp_path}", check=True, timeout=600,
    )  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rewards/env_class/mean" in r]
    assert len(steps) == 2 and all(r["agent/tool_calls_mean"] > 0 for r in steps)
    # get_reward is 1 only where the episode's own calculator call gave its row's answer: rewards follow the calls
    assert 0 < steps[0]["rewards/env_class/mean"] <= steps[0]["agent/tool_calls_mean"]
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    for s in samples:  # agent.max_turns=2: at most one turn of calls; the reward is that episode's own result
        results = [m["content"] for m in s["conversation"] if m["role"] == "tool" and m["name"] == "calculator"]
        assert s["rewards"]["env_class"] == float(bool(results) and results[-1] == s["answer"]), s
    assert any(s["rewards"]["env_class"] == 1.0 for s in samples)


@pytest.mark.parametrize(
    ("cls", "needle"),
    [
        ("NoReset", "NoReset has no reset(**row) method"),
        ("Undocumented", "tool method Undocumented.peek has no docstring"),
    ],
)
def test_the_command_refuses_a_bad_class_in_one_line(
    tmp_path: Path, cls: str, needle: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`rlexp env=class ...` in-process (the command as a process: the training test above)."""
    from tests.launch.conftest import run_cli

    target = f"{REPO / 'tests' / 'envs' / 'counter_env.py'}:{cls}"
    code = run_cli(monkeypatch, "env=class", f"env.target={target}", "logger=none", f"hydra.run.dir={tmp_path}")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert lines[0].startswith("rlexp: error: env.target=") and needle in lines[0]
