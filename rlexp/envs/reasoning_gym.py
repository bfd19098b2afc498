"""env=reasoning_gym: reasoning-gym's procedural tasks, mixed by weight, each scored by its own `score_answer`.

`env.tasks` maps a reasoning-gym dataset name to `{weight, config}` (config: that dataset's own config keys).
Rows: `env.train_size` train rows drawn from `env.seed`, `env.eval_size` eval rows from `env.seed + 1` (other
draws: no eval row is a train row's entry); each task's share of the train rows is by weight, of the eval rows
even (runs of a sweep over the weights are evaluated on the same rows), interleaved so that any prefix of the eval
split (`trainer.eval_prompts`) holds every task. The question is the entry's, after `env.system_prompt`
(null: reasoning-gym's `direct` instruction, which asks for <answer> tags). The scorer is the reward
`reasoning_gym` (rlexp.rewards.reasoning_gym): the dataset's `score_answer` on reasoning-gym's `extract_answer`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

from rlexp.config.schema import EnvConfig, RewardFnConfig, RlexpConfig
from rlexp.data.registry import Row, Splits
from rlexp.errors import ConfigError
from rlexp.rewards.reasoning_gym import dataset

_OURS = ("seed", "size")  # set by rlexp from env.seed and the split sizes


def _datasets() -> dict[str, Any]:
    from reasoning_gym.factory import DATASETS

    return DATASETS


def check(env: EnvConfig) -> None:
    from rlexp.envs import close_match

    if not env.tasks:
        raise ConfigError("env.tasks", env.tasks, "name at least one reasoning-gym dataset, e.g. {chain_sum: {}}")
    known = _datasets()
    for name, spec in env.tasks.items():
        key = f"env.tasks.{name}"
        if name not in known:
            raise close_match("env.tasks", name, known, "reasoning-gym dataset")
        spec = spec or {}
        if not isinstance(spec, dict) or set(spec) - {"weight", "config"}:
            raise ConfigError(key, spec, "use {weight: <number>, config: {<the dataset's config keys>}}")
        weight = spec.get("weight", 1.0)
        if not isinstance(weight, int | float) or weight <= 0:
            raise ConfigError(f"{key}.weight", weight, "must be a number > 0")
        config = spec.get("config") or {}
        fields = {f.name for f in dataclasses.fields(known[name][1])} - set(_OURS)
        for k in config:
            if k in _OURS:
                raise ConfigError(f"{key}.config.{k}", config[k], "rlexp sets it: use env.seed, env.train_size")
            if k not in fields:
                raise close_match(f"{key}.config", k, fields, f"config key of {name}")
    for k in ("train_size", "eval_size"):
        if getattr(env, k) < len(env.tasks):
            raise ConfigError(f"env.{k}", getattr(env, k), f"needs at least one row per task ({len(env.tasks)})")


def _configs(env: EnvConfig) -> dict[str, dict[str, Any]]:
    return {name: dict((spec or {}).get("config") or {}) for name, spec in env.tasks.items()}


def resolve(conf: RlexpConfig) -> RlexpConfig:
    env = conf.env
    scorer = RewardFnConfig(fn="reasoning_gym", name="reasoning_gym", kwargs={"tasks": _configs(env)}, range=[0.0, 1.0])
    reward = dataclasses.replace(conf.reward, name=env.name, functions=[scorer], combine="sum")
    data = dataclasses.replace(conf.dataset, name=env.name, train_size=env.train_size, eval_size=env.eval_size)
    return dataclasses.replace(conf, reward=reward, dataset=data)


def task_weights(env: EnvConfig) -> dict[str, float]:
    """Each task's configured weight."""
    return {n: float((s or {}).get("weight", 1.0)) for n, s in env.tasks.items()}


def _shares(env: EnvConfig, total: int, weighted: bool = True) -> dict[str, int]:
    """Rows per task: `total` split by weight (`weighted=False`: evenly), at least one each."""
    from rlexp.envs import split_by_weight

    return split_by_weight(task_weights(env) if weighted else dict.fromkeys(env.tasks, 1.0), total)


def _split(env: EnvConfig, split: str, seed: int, total: int) -> list[Row]:
    """A split's rows: train shared out by weight, eval evenly (the same eval rows whatever the weights: the runs
    of a sweep over them are measured alike)."""
    from reasoning_gym.utils import SYSTEM_PROMPTS

    lead = SYSTEM_PROMPTS["direct"] if env.system_prompt is None else env.system_prompt
    configs, per_task = _configs(env), []
    for name, n in _shares(env, total, weighted=split != "eval").items():
        ds = dataset(name, seed, n, configs[name])
        rows = []
        for i in range(n):
            item = ds[i]
            rows.append(
                {
                    "id": f"{name}-{split}-{i}",
                    "question": f"{lead}\n\n{item['question']}" if lead else item["question"],
                    "answer": str(item["answer"]),
                    "data_source": name,
                    "task": name,
                    "entry": json.dumps({"task": name, "seed": seed, "size": n, "index": i}),
                }
            )
        per_task.append(rows)
    # interleaved: task a's first row, task b's first, ..., then the second rows
    return [r for group in itertools.zip_longest(*per_task) for r in group if r is not None]


def rows(conf: RlexpConfig) -> Splits:
    env = conf.env
    return Splits(
        train=_split(env, "train", env.seed, env.train_size), eval=_split(env, "eval", env.seed + 1, env.eval_size)
    )


def lengths(conf: RlexpConfig) -> Any:
    """The estimates' prompt length: the longest of the generated prompts (rlexp.envs.lengths)."""
    from rlexp.envs.lengths import MEASURED_ROWS, measured_prompts

    env = conf.env  # a task's first rows are the same whatever the split's size: measure a prefix of large ones
    sample = dataclasses.replace(
        env, train_size=min(env.train_size, MEASURED_ROWS), eval_size=min(env.eval_size, MEASURED_ROWS)
    )
    return measured_prompts(conf, rows(dataclasses.replace(conf, env=sample)))


def dry_run(conf: RlexpConfig) -> list[dict[str, Any]]:
    """Per task: a few rows generated, and the scorer giving its right answer 1 and a wrong one less."""
    from rlexp.rewards.reasoning_gym import reasoning_gym_reward

    env = dataclasses.replace(conf.env, train_size=len(conf.env.tasks), eval_size=len(conf.env.tasks))
    score = reasoning_gym_reward(_configs(env))
    out = []
    for row in _split(env, "train", env.seed, len(env.tasks)):
        right, wrong = f"<answer>{row['answer']}</answer>", "<answer>rlexp-wrong</answer>"
        values = score([row["question"]] * 2, [right, wrong], entry=[row["entry"]] * 2)
        ok = values[0] == 1.0 and values[1] < 1.0
        out.append(
            {
                "name": f"env:{row['task']}",
                "status": "ok" if ok else "failed",
                "detail": f"right answer {row['answer']!r} scored {values[0]:g}, a wrong one {values[1]:g}"
                + ("" if ok else f" ({getattr(score, 'last_error', None)})"),
            }
        )
    return out
