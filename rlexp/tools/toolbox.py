"""`ToolBox` runs a turn's calls: a tool that raises, times out, is unknown or answers something other than text
yields an error message to the model and a counted error, never a crash. Per configured tool it also counts the
calls and failures since the last `drain()`; `over_budget` names a tool that failed on more than
`agent.tool_error_budget` of them (at 1.0, on every one), with its newest error: a tool broken by its config
(a calculator given an unknown keyword) stops the run instead of training the model to stop calling it."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import rlexp.tools.builtin  # noqa: F401  (registers calculator, add, python, http)
from rlexp.errors import ConfigError, RunError
from rlexp.tools.registry import Tool, registered


def known_tools() -> dict[str, Tool]:
    return registered()


def check_tools(configs: list[Any]) -> None:
    """Each configured tool exists and its kwargs pass its own check (ConfigError naming agent.tools[i])."""
    tools = known_tools()
    for i, c in enumerate(configs):
        if c.name not in tools:
            raise ConfigError(f"agent.tools[{i}].name", c.name, f"no such tool; use one of {', '.join(sorted(tools))}")
        if tools[c.name].check is not None:
            tools[c.name].check(dict(c.kwargs), f"agent.tools[{i}].kwargs")


def spec(tool: Tool) -> dict[str, Any]:
    """One tool as an OpenAI function schema, the `tools` entry chat templates take."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def tools_prompt(cfg: Any) -> str | None:
    """The system message offering the run's tools in its tool format (agent.describe_tools), or None: a
    single-turn run, or a prompt that names no tools (a model warmed up without them, as the demo's)."""
    a = cfg.agent
    if a.kind != "tools" or not a.describe_tools:
        return None
    from rlexp.config.agent_rules import tool_format
    from rlexp.tools.formats import describe

    tools = known_tools()
    return describe(tool_format(cfg), [spec(tools[c.name]) for c in a.tools])


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        raise TypeError(f"returned {value!r} where text belongs")
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) and not value.is_integer() else str(int(value))
    return json.dumps(value)  # a TypeError for what JSON cannot carry


class ToolBox:
    """The tools of a run, with their kwargs, a per-call timeout and counters (`calls`, `errors`)."""

    def __init__(self, configs: list[Any], timeout_s: float) -> None:
        tools = known_tools()
        self.tools = {c.name: (tools[c.name], dict(c.kwargs)) for c in configs}
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rlexp-tool")
        self._lock = threading.Lock()
        self.calls = self.errors = 0
        self.counts: dict[str, list[int]] = {}  # per configured tool since the drain: [calls, failures]
        self.last_error: dict[str, str] = {}  # per tool, its newest error text

    def specs(self) -> list[dict[str, Any]]:
        """The offered tools as chat templates' `tools` list (OpenAI function schema)."""
        return [spec(t) for t, _ in self.tools.values()]

    def begin(self, prompts: list[str], rows: list[Any] | None = None) -> None:
        """A batch of episodes starts (registry tools keep no state per episode; env=class's toolbox does)."""

    def finish(self, final: list[str]) -> None:
        """The batch's episodes ended with these last turns."""

    def act(self, text: str, episode: int) -> tuple[str, bool] | None:
        """A turn without calls is the episode's answer (env=openenv's toolbox makes it an action instead)."""
        return None

    def ended(self, episode: int) -> bool:
        """Whether the environment ended the episode during its calls (never: registry tools have none)."""
        return False

    def call(self, name: str, arguments: Any, episode: int | None = None) -> tuple[str, bool]:
        """(text for the model, whether it is an error); `episode`: the batch's episode making the call."""
        with self._lock:
            self.calls += 1
        text, failed = self._run(name, arguments)
        with self._lock:
            self.errors += failed
            if name in self.tools:  # a name the model made up is its own fault, not the tool's
                count = self.counts.setdefault(name, [0, 0])
                count[0] += 1
                count[1] += failed
                if failed:
                    self.last_error[name] = text.removeprefix("error: ")
        return text, failed

    def drain(self) -> dict[str, list[int]]:
        """Per tool, [calls, failures] since the last drain."""
        with self._lock:
            out, self.counts = self.counts, {}
        return out

    def over_budget(self, budget: float, what: str = "a training step") -> RunError | None:
        """The error stopping the run when a tool failed on more than `budget` of its calls since the last drain
        (budget 1.0: on all of them), else None; drains the counts."""
        return budget_error(
            self.drain(), self.last_error, budget, what, "tool {name}", "agent.tools' {name} entry (its kwargs)"
        )

    def _run(self, name: str, arguments: Any) -> tuple[str, bool]:
        if name not in self.tools:
            return f"error: unknown tool {name!r}; tools: {', '.join(self.tools)}", True
        if not isinstance(arguments, dict):
            return f"error: arguments of {name} must be a JSON object", True
        tool, kwargs = self.tools[name]
        future = self._pool.submit(tool.fn, arguments, **kwargs)
        try:
            return _text(future.result(timeout=self.timeout_s)), False
        except FutureTimeout:
            return f"error: {name} timed out after {self.timeout_s:g} s", True
        except Exception as exc:  # noqa: BLE001 - a tool's fault is the model's observation, never a crashed run
            return f"error: {name}: {type(exc).__name__}: {str(exc)[:200]}", True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def budget_error(
    counts: dict[str, list[int]], last_error: dict[str, str], budget: float, what: str, who: str, fix: str
) -> RunError | None:
    """The one agent.tool_error_budget rule: the first tool (by name) that failed on more than `budget` of its
    `counts` ([calls, failed]) — all of them at budget 1.0 — as one line naming it (`who`, `fix`: formats of its
    name) and its last error; None when every tool held."""
    for name, (calls, failed) in sorted(counts.items()):
        if calls and (failed == calls if budget >= 1 else failed > budget * calls):
            return RunError(
                f"agent.tool_error_budget={budget:g}: {who.format(name=name)} failed {failed} of its {calls} calls in "
                f"{what} (last error: {last_error.get(name, '?')}); fix {fix.format(name=name)} or raise the budget"
            )
    return None
