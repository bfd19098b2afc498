"""agent=tools in the preflight: the tool-call parser and the tools, run on the completions the preflight scores.

Each completion is read as a model turn in the run's format (rlexp.tools.formats); its calls go to the
configured tools (rlexp.tools.ToolBox) with the run's timeout. The counts and a few examples go to
validation.json; a parser or tool error is a warning (the model is told at training time), not a failure.
"""

from __future__ import annotations

from typing import Any

from rlexp.config.agent_rules import tool_format
from rlexp.config.schema import RlexpConfig
from rlexp.tools.formats import FORMATS
from rlexp.tools.toolbox import ToolBox


def dry_run(cfg: RlexpConfig, completions: list[str], examples: int = 3) -> dict[str, Any]:
    fmt = FORMATS[tool_format(cfg)]
    box = ToolBox(cfg.agent.tools, cfg.agent.tool_timeout_s)
    out: dict[str, Any] = {"format": fmt.name, "completions": len(completions), "with_calls": 0, "calls": 0}
    out.update(parse_errors=0, tool_errors=0, examples=[])
    try:
        for text in completions:
            turn = fmt.parse(text)
            out["with_calls"] += bool(turn.calls)
            out["parse_errors"] += len(turn.errors)
            for call in turn.calls:
                result, failed = box.call(call.name, call.arguments)
                out["calls"] += 1
                out["tool_errors"] += failed
                if len(out["examples"]) < examples:
                    out["examples"].append({"call": {"name": call.name, "arguments": call.arguments}, "result": result})
    finally:
        box.close()
    return out


def add_check(cfg: RlexpConfig, items: list[dict[str, Any]], rep: Any, result: dict[str, Any]) -> None:
    """The `tools` check of the preflight report (`rep`: its _Report) and result["tools"]."""
    summary = result["tools"] = dry_run(cfg, [str(it["completion"]) for it in items])
    bad = summary["parse_errors"] + summary["tool_errors"]
    detail = f"{summary['calls']} calls in {summary['with_calls']} of {summary['completions']} completions" + (
        f", {summary['parse_errors']} unparsed, {summary['tool_errors']} tool errors" if bad else ""
    )
    rep.add("tools", "warning" if bad else "ok", detail)
