"""env=openenv: an OpenEnv server's tasks, turns, reward and MCP tools (docs/envs.md).

One server (`env.url`, `env.command` or `env.image`, rlexp.envs.openenv_server), or several, each a task of
`env.tasks` with its weight. Rows: per task, the first tasks of its `TaskProvider` split (`env.split`) and of its
eval split (`env.eval_split`; the same split: its last tasks, disjoint from the train rows where it holds enough),
`env.train_size` and `env.eval_size` rows over all tasks split by weight, interleaved; a row's question is the
observation `reset(split=, index=)` starts its episode with (after `env.system_prompt`, none by default), its id the
task's own (`get_task`). Episodes: agent=tools' runner (its agent.* keys when agent=tools, else 3 turns) with
`OpenEnvToolBox` (rlexp.envs.openenv_episodes) in place of the registry's tools: the model's turns are actions,
the observations environment turns masked out of the loss, the reward (`openenv`) the environment's. MCP tools
are offered in the chat template's tool format. The servers are reached, or started, when the rows are loaded:
before any weights.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
from typing import Any

from rlexp.config.schema import EnvConfig, RewardFnConfig, RlexpConfig
from rlexp.data.registry import Row, Splits
from rlexp.envs import episode_agent, split_by_weight
from rlexp.envs.openenv_client import Live, Malformed, close, describe, fault, one_step, read, run, session
from rlexp.envs.openenv_episodes import OpenEnvToolBox, spec_dict, tool_specs
from rlexp.envs.openenv_server import check_spec, specs
from rlexp.errors import ConfigError, RunError

PROBE = "rlexp validate"  # the scripted action of `rlexp validate`'s dry run


def check(env: EnvConfig) -> None:
    """Every rule that needs no server: the shapes of the servers' keys (docker on PATH for an image)."""
    if importlib.util.find_spec("openenv") is None:
        raise ConfigError("env", "openenv", "needs OpenEnv's client: pip install 'rlexp[openenv]' (openenv==0.10.0)")
    found = specs(env)
    for spec in found:
        check_spec(spec)
        if not spec.name or any(c in spec.name for c in "/ "):
            raise ConfigError(spec.key, spec.name, "name the task without / or spaces (metrics env/<task>/...)")
    for k in ("train_size", "eval_size"):
        if getattr(env, k) < len(found):
            raise ConfigError(f"env.{k}", getattr(env, k), f"needs at least one row per task ({len(found)})")
    for k in ("timeout_s", "start_timeout_s"):
        if getattr(env, k) <= 0:
            raise ConfigError(f"env.{k}", getattr(env, k), "must be > 0 seconds")


def resolve(conf: RlexpConfig) -> RlexpConfig:
    env = conf.env
    servers = {s.name: spec_dict(s) for s in specs(env)}
    kwargs = {"servers": servers, "timeout_s": env.timeout_s, "start_timeout_s": env.start_timeout_s}
    scorer = RewardFnConfig(fn="openenv", name="openenv", kwargs=kwargs, range=[-1e9, 1e9])
    reward = dataclasses.replace(conf.reward, name=env.name, functions=[scorer], combine="sum")
    data = dataclasses.replace(conf.dataset, name=env.name, train_size=env.train_size, eval_size=env.eval_size)
    return dataclasses.replace(conf, dataset=data, agent=episode_agent(conf), reward=reward)


def lives(conf: RlexpConfig) -> dict[str, Live]:
    """Each task's server, reached (or started) and ready, and what it offers."""
    return {s.name: describe(s, conf.env) for s in specs(conf.env)}


async def _firsts(live: Live, split: str, indices: list[int]) -> list[str]:
    client = await session(live)
    try:
        out = []
        for i in indices:
            try:
                out.append(read(await client.reset(split=split, index=i), live.observation_key).text)
            except Malformed as err:
                raise RunError(f"{live.server.key}={live.server.value!r}: reset to task {split}/{i}: {err}") from None
        return out
    finally:
        await close(client)


def _rows(live: Live, split: str, indices: list[int], lead: str | None) -> list[Row]:
    try:
        firsts = run(_firsts(live, split, indices), live.timeout_s * (len(indices) + 2) + 10)
    except RunError:  # said in one line already
        raise
    except Exception as err:  # noqa: BLE001 - the server's fault at the start: one line, before the weights
        raise RunError(
            f"{live.server.key}={live.server.value!r}: resetting its tasks failed: {fault(err, live)}"
        ) from None
    rows = []
    for i, first in zip(indices, firsts, strict=True):
        task = live.get_task(split, i)
        name = str(task.get("id", f"{split}-{i}")) if isinstance(task, dict) else f"{split}-{i}"
        rows.append(
            {
                "id": f"{live.spec.name}/{name}",
                "question": f"{lead}\n\n{first}" if lead else first,
                "answer": str(task.get("answer", "")) if isinstance(task, dict) else "",
                "data_source": live.env_name,
                "task": live.spec.name,
                "env_row": json.dumps({"task": live.spec.name, "split": split, "index": i}),
            }
        )
    return rows


def _indices(live: Live, n_train: int, n_eval: int) -> tuple[list[int], list[int]]:
    """The first tasks of the train split; of the eval split its first, or its last where it is the train split."""
    total = live.num_tasks(live.split)
    if total < 1:
        raise ConfigError(f"{live.spec.key}.split", live.split, f"the split holds no tasks of {live.env_name}")
    train = list(range(min(n_train, total)))
    if live.eval_split != live.split:
        total = live.num_tasks(live.eval_split)
        if total < 1:
            raise ConfigError(f"{live.spec.key}.eval_split", live.eval_split, "the split holds no tasks")
        return train, list(range(min(n_eval, total)))
    start = max(0, total - n_eval)  # after the train rows where the split holds both
    return train, list(range(start, total))


def rows(conf: RlexpConfig) -> Splits:
    env, found = conf.env, lives(conf)
    weights = {name: live.spec.weight for name, live in found.items()}
    n_train, n_eval = split_by_weight(weights, env.train_size), split_by_weight(weights, env.eval_size)
    train, evals = [], []
    for name, live in found.items():
        t, e = _indices(live, n_train[name], n_eval[name])
        train.append(_rows(live, live.split, t, env.system_prompt))
        evals.append(_rows(live, live.eval_split, e, env.system_prompt))
    mixed = lambda parts: [r for group in itertools.zip_longest(*parts) for r in group if r is not None]  # noqa: E731
    return Splits(train=mixed(train), eval=mixed(evals))


def tools_prompt(conf: RlexpConfig) -> str | None:
    """The system message offering the servers' MCP tools in the run's tool-call format (agent.describe_tools)."""
    offered = tool_specs(lives(conf)) if conf.agent.describe_tools else []
    if not offered:
        return None
    from rlexp.config.agent_rules import tool_format
    from rlexp.tools.formats import describe as offer

    return offer(tool_format(conf), offered)


def toolbox(conf: RlexpConfig, rows: list[dict[str, Any]]) -> Any:
    by_prompt = {r["prompt"]: json.loads(r["env_row"]) for r in rows if "env_row" in r}
    return OpenEnvToolBox(lives(conf), by_prompt)


def _probe(live: Live) -> dict[str, Any]:
    head = f"{live.env_name} at {live.server.url}: split {live.split} ({live.num_tasks(live.split)} tasks)"
    head += f", eval split {live.eval_split} ({live.num_tasks(live.eval_split)} tasks)"
    if live.tools:
        head += f"; MCP tools {', '.join(t['name'] for t in live.tools)}"
    try:
        first, after = run(one_step(live, live.split, 0, PROBE), live.timeout_s * 3 + 10)
    except Malformed as err:
        return {"name": f"env:{live.spec.name}", "status": "failed", "detail": f"{head}; malformed observation: {err}"}
    except Exception as err:  # noqa: BLE001 - said in the check's line
        return {"name": f"env:{live.spec.name}", "status": "failed", "detail": f"{head}; {fault(err, live)}"}
    detail = f"{head}; reset -> {first.text[:60]!r}"
    if after is not None:
        detail += f"; step {PROBE!r} -> {after.text[:60]!r}, reward {after.reward}, done {after.done}"
    return {"name": f"env:{live.spec.name}", "status": "ok", "detail": detail}


def dry_run(conf: RlexpConfig) -> list[dict[str, Any]]:
    """Per task: its server's splits and tools, a reset and a scripted step (`rlexp validate`)."""
    return [_probe(live) for live in lives(conf).values()]
