"""Tool-call formats: how a model turn writes its calls and how their results go back, per chat template.

  qwen     (chatml)   <tool_call>{"name": ..., "arguments": {...}}</tool_call>; results in a user turn as
                      <tool_response>...</tool_response> (Qwen 2.5/3's template)
  gemma    (gemma)    ```tool_code\\nname(key=value, ...)\\n```; results as ```tool_output\\n...\\n``` in a user turn
                      (Gemma's function-calling convention)
  harmony  (harmony)  <|channel|>commentary to=functions.name <|constrain|>json<|message|>{...}<|call|>; each
                      result a message from functions.name to the assistant (gpt-oss)

`parse(turn)` finds every call of a turn (several per turn allowed); a call that does not parse, or one cut by
the token budget before its end, is a `Turn.errors` entry (the model is told; the tool is not run).
`continuation(results)` is the text after the model's turn: the results and the next assistant turn's header;
`observation(text)` the text after a turn that was an environment's action: the observation as a user turn.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    name: str
    arguments: Any


@dataclass
class Turn:
    calls: list[Call] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # malformed or cut calls, as messages for the model


@dataclass(frozen=True)
class Format:
    name: str
    turn_end: str  # the token that ends a model turn (a rollout stop token)
    call_end: str  # the token that ends a turn with a call (harmony: <|call|>), else turn_end

    def parse(self, text: str) -> Turn:
        return _PARSERS[self.name](text)

    def continuation(self, results: list[tuple[str, str]]) -> str:
        """Text after a model turn that made calls: (tool name, result) pairs, then the next turn's header."""
        return _RENDER[self.name](results)

    def observation(self, text: str) -> str:
        """Text after a model turn that was an environment's action (env=openenv): the observation as the next
        user turn, then the next assistant turn's header."""
        return _OBSERVE[self.name].format(text=text)


FORMATS = {
    "qwen": Format("qwen", "<|im_end|>", "<|im_end|>"),
    "gemma": Format("gemma", "<end_of_turn>", "<end_of_turn>"),
    "harmony": Format("harmony", "<|end|>", "<|call|>"),
}


def _json_call(body: str) -> tuple[Call | None, str | None]:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as err:
        return None, f"malformed tool call JSON: {err.msg}"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None, 'a tool call needs {"name": ..., "arguments": {...}}'
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None, "malformed tool call arguments"
    return Call(obj["name"], args), None


def _parse_qwen(text: str) -> Turn:
    turn = Turn()
    pos = 0
    while (start := text.find("<tool_call>", pos)) >= 0:
        end = text.find("</tool_call>", start)
        if end < 0:
            turn.errors.append("tool call cut before </tool_call> (token budget)")
            break
        call, err = _json_call(text[start + len("<tool_call>") : end].strip())
        turn.calls.append(call) if call else turn.errors.append(err)
        pos = end + len("</tool_call>")
    return turn


def _gemma_call(body: str) -> tuple[Call | None, str | None]:
    try:
        node = ast.parse(body.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            raise ValueError
        return Call(node.func.id, {k.arg: ast.literal_eval(k.value) for k in node.keywords}), None
    except (SyntaxError, ValueError):
        return None, "malformed tool_code: write name(key=value, ...)"


def _parse_gemma(text: str) -> Turn:
    turn = Turn()
    pos = 0
    while (start := text.find("```tool_code", pos)) >= 0:
        body_start = start + len("```tool_code")
        end = text.find("```", body_start)
        if end < 0:
            turn.errors.append("tool_code cut before its closing ``` (token budget)")
            break
        for line in filter(str.strip, text[body_start:end].splitlines()):
            call, err = _gemma_call(line)
            turn.calls.append(call) if call else turn.errors.append(err)
        pos = end + 3
    return turn


_HARMONY = re.compile(
    r"to=functions\.([\w.-]+)[^<]*(?:<\|constrain\|>\w+)?<\|message\|>(.*?)(<\|call\|>|<\|end\|>|$)", re.S
)


def _parse_harmony(text: str) -> Turn:
    turn = Turn()
    for m in _HARMONY.finditer(text):
        name, body, end = m.group(1), m.group(2), m.group(3)
        if not end:
            turn.errors.append("tool call cut before <|call|> (token budget)")
            continue
        try:
            turn.calls.append(Call(name, json.loads(body)))
        except json.JSONDecodeError as err:
            turn.errors.append(f"malformed tool call JSON: {err.msg}")
    return turn


def _render_qwen(results: list[tuple[str, str]]) -> str:
    body = "\n".join(f"<tool_response>\n{r}\n</tool_response>" for _, r in results)
    return f"\n<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"


def _render_gemma(results: list[tuple[str, str]]) -> str:
    body = "\n".join(f"```tool_output\n{r}\n```" for _, r in results)
    return f"\n<start_of_turn>user\n{body}<end_of_turn>\n<start_of_turn>model\n"


def _render_harmony(results: list[tuple[str, str]]) -> str:
    msgs = "".join(f"<|start|>functions.{n} to=assistant<|channel|>commentary<|message|>{r}<|end|>" for n, r in results)
    return msgs + "<|start|>assistant"


_OBSERVE = {
    "qwen": "\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n",
    "gemma": "\n<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n",
    "harmony": "<|start|>user<|message|>{text}<|end|><|start|>assistant",
}
_PARSERS = {"qwen": _parse_qwen, "gemma": _parse_gemma, "harmony": _parse_harmony}
_RENDER = {"qwen": _render_qwen, "gemma": _render_gemma, "harmony": _render_harmony}


def _describe_qwen(specs: list[dict[str, Any]]) -> str:
    lines = "\n".join(json.dumps(s) for s in specs)
    return (
        "# Tools\n\nYou may call one or more functions to answer the user.\n\nThe function signatures are in "
        f"<tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\nTo call a function, write a JSON object with "
        'its name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
        '"arguments": <args-json-object>}\n</tool_call>'
    )


def _params(spec: dict[str, Any], typed: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, type in the target language, description) of each parameter of an OpenAI function spec."""
    props = spec["function"].get("parameters", {}).get("properties", {})
    return [(k, typed.get(v.get("type", ""), "any"), v.get("description", "")) for k, v in props.items()]


def _describe_gemma(specs: list[dict[str, Any]]) -> str:
    py = {"string": "str", "number": "float", "integer": "int", "boolean": "bool", "array": "list", "object": "dict"}
    defs = []
    for s in specs:
        args = ", ".join(f"{n}: {t}" for n, t, _ in _params(s, py))
        defs.append(f'def {s["function"]["name"]}({args}):\n    """{s["function"].get("description", "")}"""')
    return (
        "You can call these Python functions. To call one, write\n```tool_code\nname(key=value)\n```\nEach result "
        "comes back in a ```tool_output``` block.\n\n```python\n" + "\n\n".join(defs) + "\n```"
    )


def _describe_harmony(specs: list[dict[str, Any]]) -> str:
    ts = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean", "array": "any[]"}
    body = []
    for s in specs:
        fields = "".join(f"// {d}\n{n}: {t},\n" if d else f"{n}: {t},\n" for n, t, d in _params(s, ts))
        body.append(
            f"// {s['function'].get('description', '')}\ntype {s['function']['name']} = (_: {{\n{fields}}}) => any;"
        )
    return "# Tools\n\n## functions\n\nnamespace functions {\n\n" + "\n\n".join(body) + "\n\n} // namespace functions"


_DESCRIBE = {"qwen": _describe_qwen, "gemma": _describe_gemma, "harmony": _describe_harmony}


def describe(fmt: str, specs: list[dict[str, Any]]) -> str:
    """The system message offering `specs` (OpenAI function schemas) in `fmt`'s convention."""
    return _DESCRIBE[fmt](specs)
