"""env=openenv's sessions: OpenEnv's own client (`GenericEnvClient`: one WebSocket session an episode, reset with
a task's split and index, a step an action) driven on one event loop of rlexp's; what a server offers (`Live`);
and observations read strictly.

`describe(spec, env)` asks a server, once a process: its environment's name (`/list_environments`), its
`TaskProvider` splits (`/<env>/splits`; an unknown `split` or `eval_split` is refused in one line naming the close
match), its schemas (`/schema`): the action field a model turn fills (`action_key`; null: the action's only
required text field) and the observation field the model reads (`observation_key`; null: the observation's only
field besides done, reward and metadata, else all of them as JSON), and its MCP tools (a `list_tools` step, where
the action is OpenEnv's `CallToolAction`: an MCP environment's moves are its tools, a turn without calls its
answer). An observation that is not that (no object, the field missing or not text, a reward that is no number,
`done` no boolean) is `Malformed`: the episode's fault, counted as an errored reward.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any

from rlexp.envs import close_match
from rlexp.envs.openenv_server import Server, Spec, reach, request, serving
from rlexp.errors import ConfigError, RunError

_META = ("done", "reward", "metadata")
_LIVE: dict[tuple[Spec, float, float], Live] = {}


class Malformed(Exception):
    """An observation rlexp cannot read."""


@dataclass
class Reply:
    text: str
    reward: float | None
    done: bool


@dataclass
class Live:
    """A server ready for the run, and what it offers."""

    spec: Spec
    server: Server
    env_name: str
    splits: dict[str, str]  # name -> type (train, validation, test)
    action_key: str | None  # None: an MCP environment, whose moves are tool calls
    observation_key: str | None  # None: all the observation's fields, as JSON
    timeout_s: float
    tools: list[dict[str, Any]] = field(default_factory=list)  # {name, description, parameters}

    @property
    def split(self) -> str:
        return self.spec.split

    @property
    def eval_split(self) -> str:
        if self.spec.eval_split:
            return self.spec.eval_split
        for kind in ("test", "validation"):
            for name, typ in self.splits.items():
                if typ == kind and name != self.spec.split:
                    return name
        return self.spec.split

    def num_tasks(self, split: str) -> int:
        return int(request(self.server, f"/{self.env_name}/num_tasks", self.timeout_s, {"split": split})["num_tasks"])

    def get_task(self, split: str, index: int) -> Any:
        return request(self.server, f"/{self.env_name}/task", self.timeout_s, {"split": split, "index": index})["task"]


# -- the event loop the sessions run on ---------------------------------------------------------------------------
_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def loop() -> asyncio.AbstractEventLoop:
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, daemon=True, name="rlexp-openenv").start()
    return _LOOP


def run(coro: Any, timeout_s: float) -> Any:
    """Run `coro` on the sessions' loop; its own timeouts come first, this one is the last guard."""
    return asyncio.run_coroutine_threadsafe(coro, loop()).result(timeout=timeout_s)


async def session(live: Live) -> Any:
    from openenv.core import GenericEnvClient

    client = GenericEnvClient(
        base_url=live.server.url, connect_timeout_s=live.timeout_s, message_timeout_s=live.timeout_s
    )
    await client.connect()
    return client


async def close(client: Any) -> None:
    try:
        await asyncio.wait_for(client.close(), timeout=10)
    except Exception:  # noqa: BLE001, S110 - a session of a server that went away closes as it can
        pass


def fault(err: BaseException, live: Live) -> str:
    """An exception of a session as the one-line reason an episode failed."""
    if isinstance(err, asyncio.TimeoutError | TimeoutError):
        return f"{live.spec.name}: the server took longer than env.timeout_s={live.timeout_s:g} s to answer"
    return f"{live.spec.name}: {type(err).__name__}: {str(err)[:300]}"


# -- observations ------------------------------------------------------------------------------------------------
def _reward(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float):
        raise Malformed(f"a reward of {type(value).__name__} {value!r:.40} where a number belongs")
    return float(value)


def read(result: Any, key: str | None) -> Reply:
    """A StepResult of the generic client as (text for the model, reward, done)."""
    obs = result.observation
    if not isinstance(obs, dict):
        raise Malformed(f"an observation of {type(obs).__name__} where a JSON object belongs")
    if not isinstance(result.done, bool):
        raise Malformed(f"done={result.done!r:.40}, not a boolean")
    reward = _reward(result.reward)
    if key is None:
        fields = {k: v for k, v in obs.items() if k not in _META}
        return Reply(json.dumps(fields, default=str), reward, result.done)
    if key not in obs:
        raise Malformed(f"the observation has no field {key!r} (its fields: {', '.join(sorted(obs))})")
    if not isinstance(obs[key], str):
        raise Malformed(f"the observation's {key} is {type(obs[key]).__name__} {obs[key]!r:.60}, not text")
    return Reply(obs[key], reward, result.done)


def tool_text(result: Any) -> tuple[str, bool]:
    """A CallToolObservation's result as text for the model, and whether the call failed."""
    obs = result.observation if isinstance(result.observation, dict) else {}
    if "tool_name" not in obs:
        raise Malformed("a tool call's observation without tool_name (not OpenEnv's CallToolObservation)")
    if obs.get("error"):
        error = obs["error"]
        return str(error.get("message", error) if isinstance(error, dict) else error)[:500], True
    out = obs.get("result")
    if isinstance(out, dict):  # MCP's CallToolResult: its data, else its text content
        content = out.get("content")
        texts = (
            "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
            if isinstance(content, list)
            else None
        )
        if out.get("is_error"):
            return (texts or json.dumps(out, default=str))[:500], True
        out = out["data"] if out.get("data") is not None else texts if texts is not None else out
    return (out if isinstance(out, str) else json.dumps(out, default=str)), False


def finite(reward: float | None) -> bool:
    return reward is None or math.isfinite(reward)


# -- what a server offers ----------------------------------------------------------------------------------------
def _only(props: dict[str, Any], want: str | None = None) -> str | None:
    names = [k for k, v in props.items() if want is None or v.get("type") == want]
    return names[0] if len(names) == 1 else None


def _keys(spec: Spec, env_name: str, schema: dict[str, Any]) -> tuple[str | None, str | None]:
    action = schema.get("action") or {}
    props = {k: v for k, v in (action.get("properties") or {}).items() if k != "metadata"}
    if "tool_name" in props:  # OpenEnv's CallToolAction: the moves are MCP tool calls
        action_key = None
    elif spec.action_key is not None:
        if spec.action_key not in props:
            raise close_match(f"{spec.key}.action_key", spec.action_key, props, f"action field of {env_name}")
        action_key = spec.action_key
    else:
        required = {k: props[k] for k in action.get("required", []) if k in props}
        action_key = _only(required, "string") or _only(props)
        if action_key is None:
            raise ConfigError(
                f"{spec.key}.action_key",
                None,
                f"the action of {env_name} has fields {', '.join(props) or 'none'}; name the one a model turn fills",
            )
    obs = schema.get("reset_observation") or schema.get("observation") or {}
    fields = {k: v for k, v in (obs.get("properties") or {}).items() if k not in _META}
    if spec.observation_key is not None and spec.observation_key not in fields:
        raise close_match(
            f"{spec.key}.observation_key", spec.observation_key, fields, f"observation field of {env_name}"
        )
    return action_key, spec.observation_key or _only(fields)


async def _tools(live: Live) -> list[dict[str, Any]]:
    client = await session(live)
    try:
        result = await client.step({"type": "list_tools"})
    finally:
        await close(client)
    tools = result.observation.get("tools") if isinstance(result.observation, dict) else None
    if not isinstance(tools, list):
        raise Malformed("a list_tools step answered without a tools list")
    return [
        {"name": t["name"], "description": t.get("description", ""), "parameters": t.get("input_schema") or {}}
        for t in tools
    ]


def describe(spec: Spec, env: Any) -> Live:
    """The spec's server, reached (or started) and ready, and what it offers; once a process."""
    ident = (spec, float(env.start_timeout_s), float(env.timeout_s))
    if ident in _LIVE and serving(_LIVE[ident].server):
        return _LIVE[ident]
    server = reach(spec, env.start_timeout_s)
    names = request(server, "/list_environments", env.timeout_s)
    if not isinstance(names, list) or not names:
        raise RunError(
            f"{server.key}={server.value!r}: /list_environments named no environment (not an OpenEnv server?)"
        )
    env_name = str(names[0])
    try:
        listed = request(server, f"/{env_name}/splits", env.timeout_s)
    except RunError as err:
        raise RunError(f"{err}; the environment has no TaskProvider (list_splits, num_tasks, get_task)") from None
    splits = {str(s["name"]): str(s.get("type", "")) for s in listed}
    for key, name in ((f"{spec.key}.split", spec.split), (f"{spec.key}.eval_split", spec.eval_split)):
        if name is not None and name not in splits:
            raise close_match(key, name, splits, f"split of the OpenEnv environment {env_name}")
    action_key, observation_key = _keys(spec, env_name, request(server, "/schema", env.timeout_s))
    live = Live(spec, server, env_name, splits, action_key, observation_key, float(env.timeout_s))
    if action_key is None:
        try:
            live.tools = run(_tools(live), env.timeout_s * 3 + 10)
        except Exception as err:  # noqa: BLE001 - any failure here is the server's, said in one line
            raise RunError(f"{server.key}={server.value!r}: listing its MCP tools failed: {fault(err, live)}") from None
        if not live.tools:
            raise RunError(f"{server.key}={server.value!r}: its actions are MCP tool calls, and it lists no tools")
    _LIVE[ident] = live
    return live


async def one_step(live: Live, split: str, index: int, text: str | None) -> tuple[Reply, Reply | None]:
    """An episode of at most one action: reset to the task, then `text` as the action (None: none)."""
    client = await session(live)
    try:
        first = read(await client.reset(split=split, index=index), live.observation_key)
        if text is None or live.action_key is None or first.done:
            return first, None
        return first, read(await client.step({live.action_key: text}), live.observation_key)
    finally:
        await close(client)
