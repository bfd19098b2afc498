"""env=class during training: the class's methods as the episodes' tools, and get_reward() as the reward.

`ClassToolBox` stands where agent=tools' `ToolBox` stands (rlexp.train.episodes): the runner announces a batch of
episodes (`begin`), routes episode i's calls to that episode (`call(..., episode=i)`) and hands back the episodes'
last turns (`finish`). Episode i's instance lives in a child process: each call replays reset(**row) and the
episode's calls so far there (`episodes`), so the class needs determinism, not shared state.
Each finished episode is kept under (prompt, last turn) until the reward `env_class` scores it: one more replay
in one child for the whole batch, ending with get_reward(). Rows carry `env_row`, the fields reset() was given.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any

from rlexp.config.schema import EnvConfig
from rlexp.errors import RunError
from rlexp.rewards.http_reward import json_value
from rlexp.rewards.registry import RewardFn, register
from rlexp.rewards.sandbox import Limits, Sandbox, SandboxError

_ACTIVE: ClassToolBox | None = None  # the run's toolbox, which the reward reads the episodes' calls from
KEEP = 65536  # finished episodes held for the reward at most (an eval's chunks are scored after the last one)


def child(env: EnvConfig) -> Sandbox:
    return Sandbox("user", Limits(timeout_s=env.timeout_s, memory_mb=None, nproc=None, fsize_mb=None))


def job_of(env: EnvConfig, **job: Any) -> dict[str, Any]:
    return {"kind": "env", "spec": env.target, "function": str(env.target).rpartition(":")[2], **job}


def episodes(env: EnvConfig, rows: list[dict[str, Any]], calls: list[list[Any]], reward: bool) -> dict[str, Any]:
    """Replay each row's episode in a child process: {values, errors, outputs, observations} per row."""
    items = [{"row": json_value(r), "calls": c} for r, c in zip(rows, calls, strict=True)]
    return child(env).run(job_of(env, op="run", items=items, reward=reward))


def openai_spec(tool: dict[str, Any]) -> dict[str, Any]:
    """A class tool ({name, description, parameters}) as the OpenAI function schema chat templates take."""
    return {"type": "function", "function": tool}


class ClassToolBox:
    """The class's tools for a run's episodes; `rows`: prompt -> the row reset() gets."""

    def __init__(self, env: EnvConfig, tools: list[dict[str, Any]], rows: dict[str, dict[str, Any]]) -> None:
        global _ACTIVE
        self.env, self.names, self.rows = env, [t["name"] for t in tools], rows
        self.tool_specs = [openai_spec(t) for t in tools]
        self.prompts: list[str] = []
        self.given: list[dict[str, Any] | None] = []
        self.keep: list[bool] = []
        self.calls: list[list[list[Any]]] = []
        self.done: dict[tuple[str, str], list[tuple[dict[str, Any], list[list[Any]]]]] = {}
        self.held = 0
        self._lock = threading.Lock()
        self.counts: dict[str, list[int]] = {}
        self.last_error: dict[str, str] = {}
        self.errors = 0
        self.retries = 0  # the class's tools reach no service of their own (ToolBox.retries)
        _ACTIVE = self

    def specs(self) -> list[dict[str, Any]]:
        return self.tool_specs

    def row(self, prompt: str) -> dict[str, Any]:
        return self.rows.get(prompt, {})

    def episode_row(self, episode: int) -> dict[str, Any]:
        """The row episode `episode` resets from: the one the runner handed, else its prompt's."""
        return self.given[episode] or self.row(self.prompts[episode])

    def begin(self, prompts: list[str], rows: list[Any] | None = None) -> None:
        """A batch starts; `rows` (where the runner has them): each episode's row, None for a top-up prompt."""
        self.prompts, self.calls = list(prompts), [[] for _ in prompts]
        given = rows if rows is not None else [None] * len(prompts)
        self.given = [json.loads(str(r["env_row"])) if isinstance(r, dict) and "env_row" in r else None for r in given]
        self.keep = [True] * len(prompts) if rows is None else [r is not None for r in rows]

    def act(self, text: str, episode: int) -> tuple[str, bool] | None:
        return None  # a turn without calls is the episode's answer

    def ended(self, episode: int) -> bool:
        return False

    def call(self, name: str, arguments: Any, episode: int | None = None) -> tuple[str, bool]:
        """Episode `episode`'s call, replayed after its earlier ones: (text for the model, whether an error)."""
        if name not in self.names:
            return f"error: unknown tool {name!r}; tools: {', '.join(self.names)}", True
        if not isinstance(arguments, dict) or episode is None:
            return f"error: arguments of {name} must be a JSON object", True
        calls = [*self.calls[episode], [name, arguments]]
        try:
            out = episodes(self.env, [self.episode_row(episode)], [calls], reward=False)
            err, outs = out["errors"][0], out["outputs"][0]
        except SandboxError as exc:
            err, outs = str(exc), []
        text = f"error: {err}" if err is not None else outs[-1]
        failed = err is not None or text.startswith("error: ")
        if err is None:
            self.calls[episode] = calls
        with self._lock:
            count = self.counts.setdefault(name, [0, 0])
            count[0] += 1
            count[1] += failed
            self.errors += failed
            if failed:
                self.last_error[name] = text.removeprefix("error: ")
        return text, failed

    def finish(self, final: list[str]) -> None:
        """The batch's episodes ended with these last turns: keep each for the reward."""
        if self.held > KEEP:
            self.done, self.held = {}, 0
        for i, (prompt, last, calls) in enumerate(zip(self.prompts, final, self.calls, strict=True)):
            if self.keep[i]:
                self.done.setdefault((prompt, last), []).append((self.episode_row(i), calls))
                self.held += 1

    def take(self, prompt: str, last: str) -> tuple[dict[str, Any], list[list[Any]]]:
        """The calls of an episode of `prompt` that ended with `last` (none: a completion not run as an episode)."""
        kept = self.done.get((prompt, last))
        if kept:
            self.held -= 1
            return kept.pop(0)
        return self.row(prompt), []

    def drain(self) -> dict[str, list[int]]:
        with self._lock:
            out, self.counts = self.counts, {}
        return out

    def service_error(self, what: str) -> RunError | None:
        """None: a failing child is the class's fault, counted against agent.tool_error_budget (ToolBox's)."""
        return None

    def over_budget(self, budget: float, what: str = "a training step") -> RunError | None:
        from rlexp.tools.toolbox import budget_error

        who = f"{self.env.target}'s tool {{name}}"
        return budget_error(self.drain(), self.last_error, budget, what, who, "the class")

    def close(self) -> None:
        return None


@register("env_class")
def env_class_reward(target: str, timeout_s: float = 30.0) -> RewardFn:
    """get_reward() of each episode's class instance, after reset(**row) and the episode's calls."""
    env = EnvConfig(name="class", kind="class", target=target, timeout_s=timeout_s)

    def score(prompts: Any, completions: Any, env_row: Any = None, **_: Any) -> list[float]:
        rows, calls = [], []
        for k, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            row, made = _ACTIVE.take(prompt, completion) if _ACTIVE is not None else ({}, [])
            rows.append(row or (json.loads(env_row[k]) if env_row is not None else {}))
            calls.append(made)
        out = episodes(env, rows, calls, reward=True)
        values = []
        for value, err in zip(out["values"], out["errors"], strict=True):
            if err is not None or value is None:
                score.last_error = err  # type: ignore[attr-defined]
                values.append(math.nan)
            else:
                values.append(float(value))
        return values

    score.last_error = None  # type: ignore[attr-defined]
    return score
