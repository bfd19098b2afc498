"""The tool registry: `register` a function as a tool with its description, argument schema and kwargs check.

A tool that reaches a service (`remote=True`, the builtin `http`) raises `ToolUnavailable` when the service did not
answer after its retries, and calls `count_retry()` for each retry it made: the toolbox stops the run on the first
(a dependency fault is no observation to train on) and reports the second as metrics (rlexp.tools.toolbox)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ToolFn = Callable[..., Any]  # fn(arguments: dict, **kwargs) -> text (or a JSON-able value)


class ToolUnavailable(RuntimeError):
    """The tool's service did not answer (refused, timed out, 5xx) after the tool's own retries."""


_CALL = threading.local()  # the retries of the call running in this thread (a toolbox call runs in one thread)


def count_retry() -> None:
    """Count one retry of the call running in this thread (for the step's `agent/tool_retries`)."""
    _CALL.retries = getattr(_CALL, "retries", 0) + 1


def take_retries() -> int:
    """The retries counted in this thread since the last take, reset to 0."""
    n, _CALL.retries = getattr(_CALL, "retries", 0), 0
    return n


@dataclass(frozen=True)
class Tool:
    name: str
    fn: ToolFn
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)  # JSON schema of the arguments
    check: Callable[[dict[str, Any], str], None] | None = None  # kwargs check, before any weights load
    remote: bool = False  # a service's: a call past agent.tool_timeout_s is the service's fault, as ToolUnavailable


_TOOLS: dict[str, Tool] = {}


def register(
    name: str,
    description: str,
    parameters: dict[str, Any] | None = None,
    check: Callable[[dict[str, Any], str], None] | None = None,
    remote: bool = False,
) -> Callable[[ToolFn], ToolFn]:
    """Decorator: `@register("add", "adds two numbers", {...})` on `fn(arguments, **kwargs) -> str`."""

    def deco(fn: ToolFn) -> ToolFn:
        _TOOLS[name] = Tool(name, fn, description, parameters or {}, check, remote)
        return fn

    return deco


def registered() -> dict[str, Tool]:
    """The tools registered so far (rlexp.tools.toolbox.known_tools adds the builtins)."""
    return dict(_TOOLS)
