"""The offered tools reach the prompt: a system message in the tool format's convention (agent.describe_tools),
absent for single-turn runs and for the demo, whose model was warmed up on prompts that name no tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.data.templates import render_prompt
from rlexp.tools.toolbox import tools_prompt
from tests.helpers import compose_conf, run_rlexp

ROW = {"id": 1, "question": "2+3="}
TWO = "agent.tools=[{name: calculator},{name: add}]"


def prompt(*overrides: str) -> str:
    cfg = compose_conf(list(overrides))
    return render_prompt(ROW, cfg.data_template, cfg.chat_template, None, tools_prompt(cfg))


@pytest.mark.parametrize(
    ("template", "before_question"),
    [
        ("chatml", "<|im_start|>system\n# Tools\n\nYou may call one or more functions to answer the user."),
        ("gemma", "<bos><start_of_turn>user\nYou can call these Python functions. To call one, write\n```tool_code"),
        ("harmony", "<|start|>developer<|message|># Instructions\n\n# Tools\n\n## functions\n\nnamespace functions {"),
    ],
)
def test_each_format_offers_every_tool_before_the_question(template: str, before_question: str) -> None:
    text = prompt("agent=tools", f"chat_template={template}", TWO)
    assert before_question in text
    assert text.index("calculator") < text.index("add") < text.index("2+3=")


def test_qwen_lists_the_openai_schemas_one_per_line() -> None:
    text = prompt("agent=tools", "chat_template=chatml", TWO)
    block = text[text.index("<tools>\n") + 8 : text.index("\n</tools>")].splitlines()
    assert [json.loads(line)["function"]["name"] for line in block] == ["calculator", "add"]
    assert json.loads(block[0])["function"]["parameters"]["required"] == ["expression"]


def test_no_tools_in_single_turn_demo_or_switched_off_prompts() -> None:
    plain = prompt("chat_template=chatml")
    assert plain == "<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n"
    assert prompt("experiment=tools_demo") == plain
    assert prompt("agent=tools", "chat_template=chatml", "agent.describe_tools=false") == plain


@pytest.mark.slow
def test_validate_shows_the_tools_in_the_example_prompt(tmp_path: Path) -> None:
    args = ["experiment=tools_demo", "agent.describe_tools=true", "trainer.max_prompt_tokens=768"]
    out = run_rlexp(*args, "model.max_context=1024", f"hydra.run.dir={tmp_path}", module="rlexp.validate")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "validation.json").read_text())
    assert result["example_prompt"]["prompt"].startswith("<|im_start|>system\n# Tools\n")
    assert result["tools"]["format"] == "qwen"
