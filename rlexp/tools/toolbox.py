"""`ToolBox` runs a turn's calls: a tool that raises, times out, is unknown or answers something other than text
yields an error message to the model and a counted error, never a crash. Per configured tool it also counts the
calls and failures since the last `drain()`; `over_budget` names a tool that failed on more than
`agent.tool_error_budget` of them (at 1.0, on every one), with its newest error: a tool broken by its config
(a calculator given an unknown keyword) stops the run instead of training the model to stop calling it.

A service behind a tool (`http`) that does not answer after the tool's retries (`ToolUnavailable`, or a remote
tool's call past `agent.tool_timeout_s`) is no observation to train on: `service_error` (in `over_budget` after a
training step's episodes, and after an eval's) stops the run in one line, whatever the budget, with the last
finished step's checkpoint; once the service is back the same command resumes. Retries that rode a fault out are
counted (`retries`: the run's total; the episodes report a step's as `agent/tool_retries`)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import rlexp.tools.builtin  # noqa: F401  (registers calculator, add, python, http)
from rlexp.config.agent_rules import offered_name
from rlexp.errors import ConfigError, RunError
from rlexp.tools.registry import Tool, ToolUnavailable, registered, take_retries


class ServiceDown(RunError):
    """A tool's service did not answer: the run stops in one line (during training, with a checkpoint)."""


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


def spec(tool: Tool, config: Any = None) -> dict[str, Any]:
    """One tool as an OpenAI function schema, the `tools` entry chat templates take; `config` (its agent.tools
    entry) may offer it under another name and description (an http tool's kwargs `name`, `description`)."""
    name, description = tool.name, tool.description
    if config is not None:
        name, description = offered_name(config), str(config.kwargs.get("description") or description)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": tool.parameters}}


def tools_prompt(cfg: Any) -> str | None:
    """The system message offering the run's tools in its tool format (agent.describe_tools), or None: a
    single-turn run, or a prompt that names no tools (a model warmed up without them, as the demo's)."""
    a = cfg.agent
    if a.kind != "tools" or not a.describe_tools:
        return None
    from rlexp.config.agent_rules import tool_format
    from rlexp.tools.formats import describe

    tools = known_tools()
    return describe(tool_format(cfg), [spec(tools[c.name], c) for c in a.tools])


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
        self.tools = {offered_name(c): (tools[c.name], dict(c.kwargs)) for c in configs}
        self.offers = [spec(tools[c.name], c) for c in configs]
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rlexp-tool")
        self._lock = threading.Lock()
        self.calls = self.errors = 0
        self.counts: dict[str, list[int]] = {}  # per configured tool since the drain: [calls, failures]
        self.last_error: dict[str, str] = {}  # per tool, its newest error text
        self.retries = 0  # the run's retries of remote tools' calls (a service's faults ridden out)
        self.unavailable: dict[str, str] = {}  # per tool whose service did not answer since the drain, the reason

    def specs(self) -> list[dict[str, Any]]:
        """The offered tools as chat templates' `tools` list (OpenAI function schema)."""
        return list(self.offers)

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
        """Per tool, [calls, failures] since the last drain (a service's outage since then is forgotten too)."""
        with self._lock:
            out, self.counts, self.unavailable = self.counts, {}, {}
        return out

    def service_error(self, what: str) -> ServiceDown | None:
        """The error stopping the run when a tool's service did not answer since the last drain, else None."""
        with self._lock:
            down = sorted(self.unavailable.items())
        if not down:
            return None
        name, reason = down[0]
        return ServiceDown(
            f"agent.tools' {name} entry: its service did not answer in {what} ({reason}); start it again and run "
            "the same command, which resumes from the last checkpoint, or raise its kwargs retries or timeout_s"
        )

    def over_budget(self, budget: float, what: str = "a training step") -> RunError | None:
        """The error stopping the run when a tool's service did not answer (`service_error`) or a tool failed on
        more than `budget` of its calls since the last drain (budget 1.0: on all of them), else None; drains."""
        down = self.service_error(what)
        counts = self.drain()
        return down or budget_error(
            counts, self.last_error, budget, what, "tool {name}", "agent.tools' {name} entry (its kwargs)"
        )

    def _run(self, name: str, arguments: Any) -> tuple[str, bool]:
        if name not in self.tools:
            return f"error: unknown tool {name!r}; tools: {', '.join(self.tools)}", True
        if not isinstance(arguments, dict):
            return f"error: arguments of {name} must be a JSON object", True
        tool, kwargs = self.tools[name]
        future = self._pool.submit(_counted, tool.fn, arguments, kwargs)
        try:
            value, retries = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            if tool.remote:
                self._down(name, f"no answer within agent.tool_timeout_s={self.timeout_s:g}")
            return f"error: {name} timed out after {self.timeout_s:g} s", True
        with self._lock:
            self.retries += retries
        if isinstance(value, ToolUnavailable):
            self._down(name, str(value))
            return f"error: {name} is unavailable: {str(value)[:200]}", True
        if isinstance(value, Exception):  # a tool's fault is the model's observation, never a crashed run
            return f"error: {name}: {type(value).__name__}: {str(value)[:200]}", True
        try:
            return _text(value), False
        except Exception as exc:  # noqa: BLE001 - what JSON cannot carry, as the model's observation
            return f"error: {name}: {type(exc).__name__}: {str(exc)[:200]}", True

    def _down(self, name: str, reason: str) -> None:
        with self._lock:
            self.unavailable.setdefault(name, reason)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _counted(fn: Any, arguments: dict[str, Any], kwargs: dict[str, Any]) -> tuple[Any, int]:
    """In a pool thread: (the tool's value, or the exception it raised; the retries it counted)."""
    take_retries()
    try:
        value = fn(arguments, **kwargs)
    except Exception as exc:  # noqa: BLE001 - handed to the caller, which turns it into a message
        value = exc
    return value, take_retries()


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
