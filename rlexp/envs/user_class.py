"""env=class: a user's environment class in TRL's `environment_factory` shape (`env.target`: module:Class or
path/to/file.py:Class).

`reset(**row) -> str | None` starts an episode from a row of the dataset group (its return, when text, follows
the row's question); the class's public methods are the tools the model may call (their schema from the signature
and the docstring: a method without one is refused); `get_reward()` scores the episode. All user code runs where
`reward=python` runs it: in a child process of rlexp.rewards.sandbox (`user` mode: the user's modules and working
directory) under `env.timeout_s`, dying with rlexp (rlexp.children); an episode is replayed there (reset, then its
calls in order), so the class needs no state across processes, only determinism.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rlexp.config.schema import EnvConfig, RewardFnConfig, RlexpConfig
from rlexp.data.registry import Splits, load_splits
from rlexp.envs import episode_agent
from rlexp.envs.class_tools import ClassToolBox, child, episodes, job_of, openai_spec  # and the reward env_class
from rlexp.errors import ConfigError
from rlexp.rewards.http_reward import json_value
from rlexp.rewards.sandbox import SandboxError

_KEY = "env.target"


def describe(env: EnvConfig) -> list[dict[str, Any]]:
    """The class's tools as {name, description, parameters}; a ConfigError in one line when it cannot be one."""
    target = env.target or ""
    if ":" not in target or not target.rpartition(":")[2]:
        raise ConfigError(_KEY, env.target, "use module:Class or path/to/file.py:Class")
    try:
        return child(env).run(job_of(env, op="describe"))["tools"]
    except SandboxError as err:
        raise ConfigError(_KEY, target, str(err).split(": ", 1)[1]) from None


def check(env: EnvConfig) -> None:
    describe(env)


def resolve(conf: RlexpConfig) -> RlexpConfig:
    """Episodes of turns (agent=tools' runner; its agent.* keys when agent=tools, else 3 turns) with the class's
    tools in place of the registry's, scored by get_reward() (the reward `env_class`, rlexp.envs.class_tools)."""
    env = conf.env
    agent = episode_agent(conf)
    scorer = RewardFnConfig(
        fn="env_class", name="env_class", kwargs={"target": env.target, "timeout_s": env.timeout_s}, range=[-1e9, 1e9]
    )
    reward = dataclasses.replace(conf.reward, name=env.name, functions=[scorer], combine="sum")
    data = dataclasses.replace(conf.dataset, name=env.name)
    return dataclasses.replace(conf, dataset=data, agent=agent, reward=reward)


def lengths(conf: RlexpConfig) -> Any:
    """The estimates' lengths: the prompt cap (rows are the dataset group's, not read before the run) and the
    episode's turns, each sampling every row again."""
    from rlexp.estimates.lengths import config_lengths

    n = config_lengths(conf)
    turn = f"{n.turn} tokens" if n.turn else "trainer.max_completion_tokens"
    return dataclasses.replace(n, source=f"env={conf.env.name}: {n.turns} turns of {turn} (agent.max_turns)")


def tools_prompt(conf: RlexpConfig) -> str | None:
    """The system message offering the class's tools in the run's tool-call format (agent.describe_tools)."""
    if not conf.agent.describe_tools:
        return None
    from rlexp.config.agent_rules import tool_format
    from rlexp.tools.formats import describe as offer

    return offer(tool_format(conf), [openai_spec(t) for t in describe(conf.env)])


def toolbox(conf: RlexpConfig, rows: list[dict[str, Any]]) -> Any:
    """The episodes' tools: each call routed to its episode's instance (rlexp.envs.class_tools.ClassToolBox)."""
    by_prompt = {r["prompt"]: json.loads(r["env_row"]) for r in rows if "env_row" in r}
    return ClassToolBox(conf.env, describe(conf.env), by_prompt)


def rows(conf: RlexpConfig) -> Splits:
    """The dataset group's rows, each question followed by what reset(**row) returned for it."""
    splits = load_splits(conf.dataset)
    for part in (splits.train, splits.eval):
        fields = [{k: v for k, v in r.items() if k not in ("prompt",)} for r in part]
        out = episodes(conf.env, fields, [[] for _ in part], reward=False)
        for r, f, obs in zip(part, fields, out["observations"], strict=True):
            r["task"], r["env_row"] = conf.env.name, json.dumps(json_value(f))  # what reset() is given
            if obs:
                r["question"] = f"{r['question']}\n\n{obs}"
    return splits


def dry_run(conf: RlexpConfig) -> list[dict[str, Any]]:
    """The class's tools, one reset and get_reward on the first row."""
    tools = describe(conf.env)
    row = load_splits(conf.dataset).train[:1]
    out = episodes(conf.env, row, [[]], reward=True)
    ok = out["errors"][0] is None and out["values"][0] is not None
    detail = f"tools {', '.join(t['name'] for t in tools) or 'none'}; reset and get_reward -> {out['values'][0]}"
    return [
        {
            "name": f"env:{conf.env.name}",
            "status": "ok" if ok else "failed",
            "detail": detail if ok else f"{detail} ({out['errors'][0]})",
        }
    ]
