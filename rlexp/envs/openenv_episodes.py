"""env=openenv during training: each episode a session of OpenEnv's client, the model's turns its actions, the
environment's reward the episode's.

`OpenEnvToolBox` stands where agent=tools' `ToolBox` stands (rlexp.train.episodes). `begin` resets one session an
episode to its row's task (`reset(split=, index=)`; the runner hands the rows where it has them, else the prompt
names the row); `act` sends a model turn without tool calls as the action (`{action_key: turn}`) and returns the
observation, which the runner appends as an environment turn masked out of the loss; `call` sends an MCP tool call
as OpenEnv's `call_tool` step; `ended` says the environment ended the episode (`done`) or failed it. The episode's
reward is the sum of its steps' rewards (none counts 0), kept under (prompt, last turn) until the reward `openenv`
takes it. A fault is that episode's errored reward (NaN, counted, never a number in the metrics), within
`reward.max_error_ratio` like any reward: a server slower than `env.timeout_s`, a malformed observation, a reward
that is no finite number (OpenEnv's server sends a NaN as null) or a `done` without a reward. A server that stops
answering mid-run stops the run after the step, with its checkpoint, in one line (`over_budget`).
Sessions are pooled per server: a finished episode's session serves the next reset.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from rlexp.envs.openenv_client import (
    Live,
    Malformed,
    close,
    describe,
    fault,
    finite,
    one_step,
    read,
    run,
    session,
    tool_text,
)
from rlexp.envs.openenv_server import Spec
from rlexp.errors import RunError
from rlexp.rewards.registry import RewardFn, register

_ACTIVE: OpenEnvToolBox | None = None  # the run's toolbox, which the reward takes the episodes' returns from
KEEP = 65536  # finished episodes held for the reward at most (an eval's chunks are scored after the last one)


@dataclass
class Episode:
    live: Live | None
    split: str = ""
    index: int = 0
    keep: bool = True  # False: a top-up episode of an eval chunk, whose completion is dropped
    client: Any = None
    total: float = 0.0
    error: str | None = None
    done: bool = False
    seconds: float = 0.0


def spec_dict(spec: Spec) -> dict[str, Any]:
    return {k: getattr(spec, k) for k in Spec.__dataclass_fields__}


def tool_specs(lives: dict[str, Live]) -> list[dict[str, Any]]:
    """The servers' MCP tools as OpenAI function schemas (the chat templates' `tools`), each name once."""
    seen: dict[str, dict[str, Any]] = {}
    for live in lives.values():
        for t in live.tools:
            seen.setdefault(t["name"], {"type": "function", "function": t})
    return list(seen.values())


class OpenEnvToolBox:
    """The run's episodes on its OpenEnv servers; `lives`: task -> server, `rows`: prompt -> {task, split, index}."""

    concurrent = True  # the runner hands a turn's steps of all its episodes to `exchange` at once

    def __init__(self, lives: dict[str, Live], rows: dict[str, dict[str, Any]]) -> None:
        global _ACTIVE
        self.lives, self.rows = lives, rows
        self.retries = 0  # OpenEnv's client retries nothing: a server fault is the episode's (ToolBox.retries)
        self.tool_specs = tool_specs(lives)
        self.pool: dict[int, list[Any]] = defaultdict(list)  # idle sessions per server
        self.prompts: list[str] = []
        self.episodes: list[Episode] = []
        self.kept: dict[tuple[str, str], list[tuple[float, str | None]]] = {}
        self.held = 0
        self.counts: dict[str, list[int]] = {}
        self.last_error: dict[str, str] = {}
        self.latency: dict[str, list[float]] = defaultdict(list)
        _ACTIVE = self

    def specs(self) -> list[dict[str, Any]]:
        return self.tool_specs

    def _timeout(self, live: Live | None) -> float:
        return (live.timeout_s if live is not None else 30.0) * 2 + 10

    # -- a batch of episodes -----------------------------------------------------------------------------------
    def _where(self, prompt: str, row: Any) -> Episode:
        """Episode of `prompt`: its row's task (the row's env_row where the runner has the rows, else the prompt's)."""
        place = json.loads(str(row["env_row"])) if isinstance(row, dict) and "env_row" in row else None
        place = place or self.rows.get(prompt)
        if place is None:
            return Episode(None)
        return Episode(self.lives.get(place["task"]), place["split"], int(place["index"]))

    def begin(self, prompts: list[str], rows: list[Any] | None = None) -> None:
        """A batch of episodes starts, one session each reset to its task; `rows` (None entries: top-up prompts of
        an eval chunk, not kept) where the runner has them."""
        self.prompts = list(prompts)
        self.episodes = [self._where(p, rows[i] if rows is not None else None) for i, p in enumerate(prompts)]
        for i, ep in enumerate(self.episodes):
            ep.keep = rows is None or rows[i] is not None
        wait = max([self._timeout(ep.live) for ep in self.episodes] or [10.0])
        run(self._all(self._reset(ep) for ep in self.episodes), wait)

    @staticmethod
    async def _all(coros: Any) -> None:
        await asyncio.gather(*coros)

    async def _reset(self, ep: Episode) -> None:
        if ep.live is None:
            ep.error = "a prompt of no task of this run"
            return
        start = time.monotonic()
        try:
            idle = self.pool[id(ep.live.server)]
            ep.client = idle.pop() if idle else await session(ep.live)
            self._take_reply(ep, read(await ep.client.reset(split=ep.split, index=ep.index), ep.live.observation_key))
        except Exception as err:  # noqa: BLE001 - the episode's fault, never the run's
            self._fail(ep, err)
        ep.seconds += time.monotonic() - start

    def _take_reply(self, ep: Episode, reply: Any) -> None:
        if not finite(reply.reward):
            raise Malformed(f"a reward of {reply.reward}")
        if reply.done and reply.reward is None:
            raise Malformed("done without a reward (OpenEnv's server sends a NaN reward as null)")
        ep.total += reply.reward or 0.0
        ep.done = reply.done

    def _fail(self, ep: Episode, err: BaseException) -> None:
        assert ep.live is not None
        what = f"malformed observation: {err}" if isinstance(err, Malformed) else None
        ep.error = f"{ep.live.spec.name}: {what}" if what else fault(err, ep.live)
        if not isinstance(err, Malformed) and ep.client is not None:  # a session that failed is not reused
            client, ep.client = ep.client, None
            asyncio.ensure_future(close(client))

    async def _step(self, ep: Episode, action: dict[str, Any], tool: bool) -> tuple[str, bool]:
        start = time.monotonic()
        try:  # a session that never answers is its episode's fault, never its batch's (`exchange`)
            result = await asyncio.wait_for(ep.client.step(action), self._timeout(ep.live))
            text, failed = tool_text(result) if tool else (None, False)
            reply = read(result, None if tool else ep.live.observation_key)
            self._take_reply(ep, reply)
            return (text if tool else reply.text), failed
        except Exception as err:  # noqa: BLE001 - the episode's fault, never the run's
            self._fail(ep, err)
            return f"error: {ep.error}", True
        finally:
            ep.seconds += time.monotonic() - start

    def _guard(self, needs: dict[int, Any]) -> float:
        """The last guard of a batch of steps (each step has its own timeout, `_step`)."""
        steps = [(1 if isinstance(n, str) else len(n), self.episodes[i].live) for i, n in needs.items()]
        return max([k * self._timeout(live) for k, live in steps] or [0.0]) + 10

    def act(self, text: str, episode: int) -> tuple[str, bool] | None:
        """A model turn without tool calls as the episode's action: (the observation, whether the episode ended);
        None where the environment's moves are tool calls (the turn is its answer)."""
        return run(self._act(text, episode), self._timeout(self.episodes[episode].live) + 10)

    async def _act(self, text: str, episode: int) -> tuple[str, bool] | None:
        ep = self.episodes[episode]
        if ep.live is not None and ep.live.action_key is None:
            return None
        if ep.error is not None or ep.done:
            return f"error: {ep.error}" if ep.error else "", True
        out, _ = await self._step(ep, {ep.live.action_key: text}, tool=False)
        return out, ep.done or ep.error is not None

    def call(self, name: str, arguments: Any, episode: int | None = None) -> tuple[str, bool]:
        """An MCP tool call of episode `episode`, as OpenEnv's call_tool step: (text for the model, failed)."""
        ep = self.episodes[episode] if episode is not None else Episode(None)
        return self._counted(name, *run(self._call(name, arguments, ep), self._timeout(ep.live) + 10))

    async def _call(self, name: str, arguments: Any, ep: Episode) -> tuple[str, bool, bool]:
        """(text, failed, whether the call reached the server and counts toward agent.tool_error_budget)."""
        names = [t["name"] for t in (ep.live.tools if ep.live is not None else [])]
        if name not in names:
            return f"error: unknown tool {name!r}; tools: {', '.join(names) or 'none'}", True, False
        if not isinstance(arguments, dict):
            return f"error: arguments of {name} must be a JSON object", True, False
        if ep.error is not None or ep.done:
            return f"error: {ep.error or 'the episode is over'}", True, False
        action = {"type": "call_tool", "tool_name": name, "arguments": arguments}
        return (*await self._step(ep, action, tool=True), True)

    def _counted(self, name: str, text: str, failed: bool, counts: bool) -> tuple[str, bool]:
        if counts:
            count = self.counts.setdefault(name, [0, 0])
            count[0] += 1
            count[1] += failed
            if failed:
                self.last_error[name] = text.removeprefix("error: ")
        return (f"error: {text}" if failed and not text.startswith("error: ") else text), failed

    def exchange(self, needs: dict[int, Any]) -> dict[int, tuple[list[Any], int]]:
        """A turn's environment steps of all its episodes at once (`EpisodeRunner._exchange`: episode -> its action
        text or its [(tool, arguments)] calls), each episode's own calls one after another in its session; the
        counters then taken in episode order, as `act` and `call` one episode after another would."""

        async def turn(i: int, need: Any) -> list[Any]:
            if isinstance(need, str):
                return [await self._act(need, i)]
            return [await self._call(name, arguments, self.episodes[i]) for name, arguments in need]

        async def turns() -> list[list[Any]]:
            return await asyncio.gather(*(turn(i, need) for i, need in needs.items()))

        said = run(turns(), self._guard(needs)) if needs else []
        out = {}
        for (i, need), replies in zip(needs.items(), said, strict=True):
            if not isinstance(need, str):
                replies = [self._counted(name, *r) for (name, _), r in zip(need, replies, strict=True)]
            out[i] = (replies, 0)  # OpenEnv's client retries nothing (`retries`)
        return out

    def ended(self, episode: int) -> bool:
        ep = self.episodes[episode]
        return ep.done or ep.error is not None

    def finish(self, final: list[str]) -> None:
        """The batch's episodes ended with these last turns: keep each return for the reward, pool the sessions."""
        if self.held > KEEP:
            self.kept, self.held = {}, 0
        for prompt, last, ep in zip(self.prompts, final, self.episodes, strict=True):
            if not ep.keep:
                continue
            value = math.nan if ep.error is not None else ep.total
            self.kept.setdefault((prompt, last), []).append((value, ep.error))
            self.held += 1
            if ep.live is not None:
                self.latency[ep.live.spec.name].append(ep.seconds)
        for ep in self.episodes:
            if ep.client is not None and ep.live is not None:
                self.pool[id(ep.live.server)].append(ep.client)
            ep.client = None

    def take(self, prompt: str, last: str) -> tuple[float, str | None] | None:
        kept = self.kept.get((prompt, last))
        if kept:
            self.held -= 1
            return kept.pop(0)
        return None

    # -- per step -------------------------------------------------------------------------------------------------
    def drain(self) -> dict[str, list[int]]:
        out, self.counts = self.counts, {}
        return out

    def drain_tasks(self) -> dict[str, dict[str, float]]:
        out = {t: {"latency_mean_s": sum(v) / len(v)} for t, v in self.latency.items() if v}
        self.latency = defaultdict(list)
        return out

    def service_error(self, what: str) -> RunError | None:
        """A server that stopped answering during the episodes (its exit code where rlexp started it), else None:
        no eval or step is made of a dead server's errors (ToolBox.service_error: a ServiceDown, which the session
        stops on with a checkpoint and summary.json)."""
        from rlexp.tools.toolbox import ServiceDown

        failed = {id(ep.live.server): ep.live for ep in self.episodes if ep.error is not None and ep.live is not None}
        for live in failed.values():
            why = live.server.gone()
            if why is not None:
                return ServiceDown(
                    f"{live.server.key}={live.server.value!r}: {why} during {what}; start it again, then rerun the "
                    "same command to resume from the last checkpoint"
                )
        return None

    def over_budget(self, budget: float, what: str = "a training step") -> RunError | None:
        """A server that stopped answering during the step's episodes, else an MCP tool over
        agent.tool_error_budget; None when all held."""
        down = self.service_error(what)
        if down is not None:
            return down
        from rlexp.tools.toolbox import budget_error

        return budget_error(self.drain(), self.last_error, budget, what, "the environment's MCP tool {name}", "it")

    def close(self) -> None:
        clients = [c for idle in self.pool.values() for c in idle]
        self.pool.clear()
        if clients:
            run(self._all(close(c) for c in clients), 30)


def _one_episode(servers: dict[str, dict[str, Any]], row: Any, completion: str, timeouts: Any) -> tuple[float, Any]:
    """A completion not run as an episode (rlexp validate's): its row's task reset, the completion its action."""
    place = json.loads(str(row)) if row is not None else None
    if not place or place.get("task") not in servers:
        return math.nan, "a completion without its env_row (the task it belongs to)"
    live = describe(Spec(**servers[place["task"]]), timeouts)
    try:
        first, after = run(one_step(live, place["split"], int(place["index"]), completion), live.timeout_s * 3 + 10)
    except Malformed as err:
        return math.nan, f"{live.spec.name}: malformed observation: {err}"
    except Exception as err:  # noqa: BLE001 - the episode's fault
        return math.nan, fault(err, live)
    rewards = [r.reward for r in (first, after) if r is not None]
    if not all(finite(r) for r in rewards):
        return math.nan, f"{live.spec.name}: a reward of {rewards}"
    return sum(r or 0.0 for r in rewards), None


def _check(key: str, kwargs: dict[str, Any]) -> None:
    from rlexp.errors import ConfigError

    if not isinstance(kwargs.get("servers"), dict) or not kwargs["servers"]:
        raise ConfigError(f"{key}.servers", kwargs.get("servers"), "env=openenv sets it: {task: its server's spec}")


@register("openenv", check=_check)
def openenv_reward(servers: dict[str, Any], timeout_s: float = 30.0, start_timeout_s: float = 60.0) -> RewardFn:
    """Each episode's return from its OpenEnv server (the sum of its steps' rewards); NaN for a faulty episode."""
    timeouts = SimpleNamespace(timeout_s=timeout_s, start_timeout_s=start_timeout_s)

    def score(prompts: Any, completions: Any, env_row: Any = None, **_: Any) -> list[float]:
        values = []
        for k, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            kept = _ACTIVE.take(prompt, completion) if _ACTIVE is not None else None
            if kept is None:
                kept = _one_episode(servers, env_row[k] if env_row is not None else None, completion, timeouts)
            value, err = kept
            if err is not None:
                score.last_error = err  # type: ignore[attr-defined]
            values.append(math.nan if err is not None else float(value))
        return values

    score.last_error = None  # type: ignore[attr-defined]
    score.drain_tasks = lambda: _ACTIVE.drain_tasks() if _ACTIVE is not None else {}  # type: ignore[attr-defined]
    return score
