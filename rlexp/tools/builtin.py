"""Builtin tools: `calculator` (arithmetic expressions), `add` (sum of numbers), `python` (code run in the reward
sandbox: no network, limits, a timeout) and `http` (a user's endpoint, token from an environment variable; retried,
then ToolUnavailable; offered to the model under its kwargs `name`, e.g. a service that is the calculator)."""

from __future__ import annotations

import ast
import json
import operator
import os
from typing import Any

from rlexp.errors import ConfigError
from rlexp.tools.registry import ToolUnavailable, count_retry, register

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_BIN |= {ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _BIN[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ValueError("only numbers and + - * / // % ** ( ) are allowed")


def evaluate_expression(expression: str) -> float:
    """An arithmetic expression's value, without eval(): only numbers and arithmetic operators."""
    if len(expression) > 200:
        raise ValueError("expression longer than 200 characters")
    return _eval(ast.parse(expression, mode="eval").body)


@register(
    "calculator",
    "Evaluate an arithmetic expression such as 12+34*2",
    {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
)
def calculator(arguments: dict[str, Any]) -> float:
    return evaluate_expression(str(arguments["expression"]))


@register(
    "add",
    "Add numbers",
    {"type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "number"}}}},
)
def add(arguments: dict[str, Any]) -> float:
    numbers = arguments.get("numbers", [v for k, v in sorted(arguments.items())])
    if not isinstance(numbers, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in numbers
    ):
        raise ValueError("give numbers as a list of numbers")
    return sum(numbers)


def _check_python(kwargs: dict[str, Any], key: str) -> None:
    from rlexp.rewards.sandbox import require_bwrap

    unknown = set(kwargs) - {"sandbox", "timeout_s", "memory_mb"}
    if unknown:
        raise ConfigError(
            f"{key}.{sorted(unknown)[0]}", kwargs[sorted(unknown)[0]], "use sandbox, timeout_s, memory_mb"
        )
    _positive(kwargs, key, "timeout_s", "memory_mb")
    mode = kwargs.get("sandbox", "bwrap")
    if mode not in ("bwrap", "process"):
        raise ConfigError(f"{key}.sandbox", mode, "use bwrap (isolated, no network) or process")
    if mode == "bwrap":
        require_bwrap(f"{key}.sandbox", mode, "sandbox: process")


_SANDBOXES: dict[tuple, Any] = {}


@register(
    "python",
    "Run Python code and return what it prints",
    {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    check=_check_python,
)
def python(arguments: dict[str, Any], sandbox: str = "bwrap", timeout_s: float = 5.0, memory_mb: int = 512) -> str:
    from rlexp.rewards.sandbox import Limits, Sandbox

    key = (sandbox, timeout_s, memory_mb)
    if key not in _SANDBOXES:
        _SANDBOXES[key] = Sandbox(sandbox, Limits(timeout_s=timeout_s, memory_mb=memory_mb, parallel=1))
    answer = _SANDBOXES[key].run({"kind": "exec", "items": [{"code": str(arguments["code"])}]})
    return answer["outputs"][0]


def _check_http(kwargs: dict[str, Any], key: str) -> None:
    if not str(kwargs.get("url", "")).startswith(("http://", "https://")):
        raise ConfigError(f"{key}.url", kwargs.get("url"), "set the tool's endpoint, http:// or https://")
    unknown = set(kwargs) - {"url", "token_env", "timeout_s", "retries", "backoff_s", "name", "description"}
    if unknown:
        raise ConfigError(
            f"{key}.{sorted(unknown)[0]}",
            kwargs[sorted(unknown)[0]],
            "use url, token_env, timeout_s, retries, backoff_s, name, description",
        )
    _positive(kwargs, key, "timeout_s")
    retries, backoff = kwargs.get("retries", 0), kwargs.get("backoff_s", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"{key}.retries", retries, "use a whole number >= 0")
    if isinstance(backoff, bool) or not isinstance(backoff, int | float) or not 0 <= backoff < float("inf"):
        raise ConfigError(f"{key}.backoff_s", backoff, "use a number of seconds >= 0")
    for name in ("name", "description"):
        if name in kwargs and not (isinstance(kwargs[name], str) and kwargs[name].strip()):
            raise ConfigError(f"{key}.{name}", kwargs[name], "use a non-empty string")
    env = kwargs.get("token_env")
    if env and env not in os.environ:
        raise ConfigError(f"{key}.token_env", env, "export this environment variable with the service's bearer token")


def _positive(kwargs: dict[str, Any], key: str, *names: str) -> None:
    """A tool's limits (`timeout_s`, `memory_mb`): positive numbers, refused before a run starts."""
    for name in names:
        value = kwargs.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
            raise ConfigError(f"{key}.{name}", value, "use a positive number")


@register(
    "http",
    "Ask a web service: POST the arguments as JSON, get text back",
    {"type": "object"},
    check=_check_http,
    remote=True,
)
def http(
    arguments: dict[str, Any],
    url: str,
    token_env: str | None = None,
    timeout_s: float = 5.0,
    retries: int = 2,
    backoff_s: float = 0.5,
    **_: Any,  # name, description: how the tool is offered (rlexp.tools.toolbox.offer)
) -> Any:
    """POST {"arguments": ...}; the answer's "result" (or its body). A timeout, a refused connection, a 429 or a
    5xx is retried `retries` times (backoff from `backoff_s`, each retry counted); still failing, the service is
    ToolUnavailable. Another 4xx is this call's error. The bearer token is read from the environment variable
    `token_env` at call time, never stored or logged."""
    from rlexp.rewards.http_reward import PostFailed, Retries, opener_for, post_json

    headers = {"Content-Type": "application/json"}
    if token_env and os.environ.get(token_env):
        headers["Authorization"] = f"Bearer {os.environ[token_env]}"
    how = Retries(timeout_s, retries, backoff_s)
    try:
        raw = post_json(opener_for(url), url, {"arguments": arguments}, headers, how, _count)
    except PostFailed as err:
        if err.transient:
            raise ToolUnavailable(f"POST {url} failed after {err.attempts} attempt(s): {err.reason}") from None
        raise RuntimeError(err.reason) from None  # the model's observation: the service's answer, not its URL
    body = raw[: 1 << 16].decode(errors="replace")
    try:
        payload = json.loads(body)
    except json.JSONDecodeError:
        return body
    return payload.get("result", body) if isinstance(payload, dict) else body


def _count(key: str) -> None:
    if key == "retries":
        count_retry()
