"""The tool registry: `register` a function as a tool with its description, argument schema and kwargs check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ToolFn = Callable[..., Any]  # fn(arguments: dict, **kwargs) -> text (or a JSON-able value)


@dataclass(frozen=True)
class Tool:
    name: str
    fn: ToolFn
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)  # JSON schema of the arguments
    check: Callable[[dict[str, Any], str], None] | None = None  # kwargs check, before any weights load


_TOOLS: dict[str, Tool] = {}


def register(
    name: str,
    description: str,
    parameters: dict[str, Any] | None = None,
    check: Callable[[dict[str, Any], str], None] | None = None,
) -> Callable[[ToolFn], ToolFn]:
    """Decorator: `@register("add", "adds two numbers", {...})` on `fn(arguments, **kwargs) -> str`."""

    def deco(fn: ToolFn) -> ToolFn:
        _TOOLS[name] = Tool(name, fn, description, parameters or {}, check)
        return fn

    return deco


def registered() -> dict[str, Tool]:
    """The tools registered so far (rlexp.tools.toolbox.known_tools adds the builtins)."""
    return dict(_TOOLS)
