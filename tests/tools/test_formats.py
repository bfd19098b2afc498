"""Parser tables of the three tool-call formats: valid calls, malformed JSON, an unknown tool, several calls in
one turn, a call cut by the token budget; and the text each renders for results."""

from __future__ import annotations

import pytest

from rlexp.config.schema import ToolConfig
from rlexp.tools.formats import FORMATS, Call
from rlexp.tools.toolbox import ToolBox

QWEN = [
    ('<tool_call>{"name": "add", "arguments": {"numbers": [1, 2]}}</tool_call>', [Call("add", {"numbers": [1, 2]})], 0),
    ('<tool_call>{"name": "add", "arguments": {"numbers": [1, 2}}</tool_call>', [], 1),  # malformed JSON
    ('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', [Call("nope", {})], 0),  # unknown: the box says so
    (
        '<tool_call>{"name":"add","arguments":{"numbers":[1]}}</tool_call>\n'
        '<tool_call>{"name":"calculator","arguments":"{\\"expression\\": \\"2*3\\"}"}</tool_call>',
        [Call("add", {"numbers": [1]}), Call("calculator", {"expression": "2*3"})],
        0,
    ),
    ('<tool_call>{"name": "add", "argu', [], 1),  # cut by the budget
    ("The answer is 3.", [], 0),
]
GEMMA = [
    ("```tool_code\nadd(numbers=[1, 2])\n```", [Call("add", {"numbers": [1, 2]})], 0),
    ("```tool_code\nadd(numbers=[1, 2)\n```", [], 1),
    ("```tool_code\nnope()\n```", [Call("nope", {})], 0),
    (
        "```tool_code\nadd(numbers=[1])\ncalculator(expression='2*3')\n```",
        [Call("add", {"numbers": [1]}), Call("calculator", {"expression": "2*3"})],
        0,
    ),
    ("```tool_code\nadd(numb", [], 1),
    ("The answer is 3.", [], 0),
]
HARMONY = [
    (
        '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"numbers": [1, 2]}<|call|>',
        [Call("add", {"numbers": [1, 2]})],
        0,
    ),
    ('<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"numbers": [1, 2}<|call|>', [], 1),
    ("<|channel|>commentary to=functions.nope<|message|>{}<|call|>", [Call("nope", {})], 0),
    (
        '<|channel|>commentary to=functions.add<|message|>{"numbers": [1]}<|call|><|start|>assistant'
        '<|channel|>commentary to=functions.calculator<|message|>{"expression": "2*3"}<|call|>',
        [Call("add", {"numbers": [1]}), Call("calculator", {"expression": "2*3"})],
        0,
    ),
    ('<|channel|>commentary to=functions.add<|message|>{"numb', [], 1),
    ("<|channel|>final<|message|>The answer is 3.<|return|>", [], 0),
]


@pytest.mark.parametrize(
    ("fmt", "text", "calls", "errors"),
    [(f, *case) for f, table in (("qwen", QWEN), ("gemma", GEMMA), ("harmony", HARMONY)) for case in table],
)
def test_parser_table(fmt, text, calls, errors) -> None:  # noqa: ANN001
    turn = FORMATS[fmt].parse(text)
    assert turn.calls == calls
    assert len(turn.errors) == errors


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("qwen", "\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
        ("gemma", "\n<start_of_turn>user\n```tool_output\n3\n```<end_of_turn>\n<start_of_turn>model\n"),
        ("harmony", "<|start|>functions.add to=assistant<|channel|>commentary<|message|>3<|end|><|start|>assistant"),
    ],
)
def test_results_render_in_the_formats_convention(fmt, expected) -> None:  # noqa: ANN001
    assert FORMATS[fmt].continuation([("add", "3")]) == expected


def test_an_unknown_tool_is_an_error_message_and_counted() -> None:
    box = ToolBox([ToolConfig(name="add")], timeout_s=1.0)
    text, failed = box.call("nope", {})
    assert failed and "unknown tool 'nope'" in text
    assert box.call("add", {"numbers": [2, 3]}) == ("5", False)
    assert (box.calls, box.errors) == (2, 1)


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "add"}</tool_call>',
        "<tool_call>[1, 2]</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
    ],
)
def test_calls_tunix_0_1_7_crashes_on_are_parsed_or_answered(text) -> None:  # noqa: ANN001
    """Tunix's QwenToolParser catches only JSONDecodeError: a call without "arguments" or "name", or JSON that is
    not an object, raises out of the rollout. rlexp's parser takes the first as a call with no arguments and
    answers the others with an error message."""
    from tunix.rl.agentic.parser.tool_parser.qwen_parser import QwenToolParser

    with pytest.raises((KeyError, TypeError)):
        QwenToolParser().parse(text)
    turn = FORMATS["qwen"].parse(text)
    if '"name"' in text:
        assert turn.calls == [Call("add", {})] and not turn.errors
    else:
        assert not turn.calls and turn.errors == ['a tool call needs {"name": ..., "arguments": {...}}']
