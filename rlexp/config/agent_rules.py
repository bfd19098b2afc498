"""Rules of the `agent` group: the interaction's kind, its turns and budgets, and which tool-call format the chat
template can carry. Pure Python; the tools' names are checked against the registry in rlexp.checks.
"""

from __future__ import annotations

import re
from typing import Any

from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError

KINDS = ("single_turn", "tools")
FORMATS = ("qwen", "gemma", "harmony")
# the chat template whose turn markers each format's tool calls and results sit between; `plain` (no markers)
# carries any of them as text
FORMAT_TEMPLATE = {"qwen": "chatml", "gemma": "gemma", "harmony": "harmony"}


def offered_name(tool: Any) -> str:
    """The name the model calls a configured tool (an agent.tools entry) by: an `http` tool's kwargs `name` (a
    service offered as, e.g., the calculator), else its registry name."""
    renamed = tool.kwargs.get("name") if tool.name == "http" else None
    return str(renamed) if renamed else str(tool.name)


def tool_format(cfg: RlexpConfig) -> str:
    """The tool-call format a run uses: agent.tool_format, or the one of chat_template when it is `auto`."""
    a, template = cfg.agent, cfg.chat_template.name
    if a.tool_format != "auto":
        return a.tool_format
    for fmt, name in FORMAT_TEMPLATE.items():
        if name == template:
            return fmt
    raise ConfigError(
        "agent.tool_format",
        "auto",
        f"chat_template={template} has no tool-call format; use chat_template=chatml, gemma or harmony, or set "
        f"agent.tool_format to one of {', '.join(FORMATS)}",
    )


def check_agent(cfg: RlexpConfig) -> None:
    """Raise ConfigError naming the key of the first broken rule of the agent group."""
    a, t = cfg.agent, cfg.trainer
    if a.kind not in KINDS:
        raise ConfigError("agent.kind", a.kind, f"use one of {', '.join(KINDS)}")
    if a.max_turns < 1:
        raise ConfigError("agent.max_turns", a.max_turns, "an episode needs at least 1 model turn; use 1 or more")
    if a.kind == "single_turn":
        if a.max_turns != 1 or a.tools:
            key, value = ("agent.max_turns", a.max_turns) if a.max_turns != 1 else ("agent.tools", len(a.tools))
            raise ConfigError(key, value, "agent=single_turn has one turn and no tools; use agent=tools")
        return
    if not a.tools and cfg.env.kind not in ("class", "openenv"):  # the class's methods, the server's MCP tools
        raise ConfigError("agent.tools", [], "agent=tools needs at least one tool, e.g. [{name: calculator}]")
    names = [offered_name(tool) for tool in a.tools]
    if len(set(names)) != len(names):
        raise ConfigError("agent.tools", names, "each tool may be offered once (an http tool: give each its own name)")
    if a.tool_format != "auto" and a.tool_format not in FORMATS:
        raise ConfigError("agent.tool_format", a.tool_format, f"use auto or one of {', '.join(FORMATS)}")
    fmt = tool_format(cfg)
    template = cfg.chat_template.name
    if template != "plain" and FORMAT_TEMPLATE[fmt] != template:
        raise ConfigError(
            "agent.tool_format",
            fmt,
            f"chat_template={template} cannot carry {fmt} tool calls; use agent.tool_format=auto or "
            f"chat_template={FORMAT_TEMPLATE[fmt]}",
        )
    turn = a.max_turn_tokens
    if turn is not None and not 1 <= turn <= t.max_completion_tokens:
        raise ConfigError(
            "agent.max_turn_tokens",
            turn,
            f"use 1 to trainer.max_completion_tokens={t.max_completion_tokens} (the episode's budget), or null",
        )
    if a.max_tool_tokens < 1:
        raise ConfigError("agent.max_tool_tokens", a.max_tool_tokens, "use 1 or more")
    if not a.tool_timeout_s > 0:
        raise ConfigError("agent.tool_timeout_s", a.tool_timeout_s, "use a positive number of seconds")
    if not 0 < a.tool_error_budget <= 1:
        raise ConfigError("agent.tool_error_budget", a.tool_error_budget, "use the share of a step's calls in (0, 1]")
    if a.answer_pattern is not None:
        try:
            re.compile(a.answer_pattern)
        except re.error as err:
            raise ConfigError("agent.answer_pattern", a.answer_pattern, f"not a regular expression: {err}") from None
    if t.rollout.engine != "vanilla":
        raise ConfigError("trainer.rollout.engine", t.rollout.engine, "agent=tools samples with vanilla; use it")
