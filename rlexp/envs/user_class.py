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
from typing import Any

from rlexp.config.schema import EnvConfig, RlexpConfig
from rlexp.data.registry import Splits, load_splits
from rlexp.errors import ConfigError
from rlexp.rewards.http_reward import json_value
from rlexp.rewards.sandbox import Limits, Sandbox, SandboxError

_KEY = "env.target"


def _box(env: EnvConfig) -> Sandbox:
    return Sandbox("user", Limits(timeout_s=env.timeout_s, memory_mb=None, nproc=None, fsize_mb=None))


def _job(env: EnvConfig, **job: Any) -> dict[str, Any]:
    return {"kind": "env", "spec": env.target, "function": str(env.target).rpartition(":")[2], **job}


def describe(env: EnvConfig) -> list[dict[str, Any]]:
    """The class's tools as {name, description, parameters}; a ConfigError in one line when it cannot be one."""
    target = env.target or ""
    if ":" not in target or not target.rpartition(":")[2]:
        raise ConfigError(_KEY, env.target, "use module:Class or path/to/file.py:Class")
    try:
        return _box(env).run(_job(env, op="describe"))["tools"]
    except SandboxError as err:
        raise ConfigError(_KEY, target, str(err).split(": ", 1)[1]) from None


def check(env: EnvConfig) -> None:
    describe(env)


def episodes(env: EnvConfig, rows: list[dict[str, Any]], calls: list[list[Any]], reward: bool) -> dict[str, Any]:
    """Replay each row's episode in a child process: {values, errors, outputs, observations} per row."""
    items = [{"row": json_value(r), "calls": c} for r, c in zip(rows, calls, strict=True)]
    return _box(env).run(_job(env, op="run", items=items, reward=reward))


def resolve(conf: RlexpConfig) -> RlexpConfig:
    data = dataclasses.replace(conf.dataset, name=conf.env.name)
    return dataclasses.replace(conf, dataset=data)


def rows(conf: RlexpConfig) -> Splits:
    """The dataset group's rows, each question followed by what reset(**row) returned for it."""
    splits = load_splits(conf.dataset)
    for part in (splits.train, splits.eval):
        fields = [{k: v for k, v in r.items() if k not in ("prompt",)} for r in part]
        out = episodes(conf.env, fields, [[] for _ in part], reward=False)
        for r, obs in zip(part, out["observations"], strict=True):
            r["task"] = conf.env.name
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
