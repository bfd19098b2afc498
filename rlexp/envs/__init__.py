"""Environments: the `env` group supplies a run's rows, scorer, turns and tools in one choice (docs/envs.md).

`env=none` (the default) leaves the `dataset`, `reward` and `agent` groups as they are. Any other kind is one module
of this package, listed in `KINDS`, with four functions:

  check(env)        every rule of the env's keys, cheap and before JAX (unknown names: the close match)
  resolve(conf)     the config the run trains with: its reward functions (and, for a tool-using kind, its agent)
                    replaced by the env's, its dataset's name and sizes by the env's
  rows(conf)        the train and eval rows (`rlexp.data.registry.Splits`), each with a `task` field
  dry_run(conf)     `rlexp validate`'s check: per task, rows generated and the scorer on a right and a wrong answer

A kind whose episodes have turns (class, openenv) also has `tools_prompt(conf)` and `toolbox(conf, rows)`: the tools
its system message offers, and what stands where agent=tools' ToolBox stands. Optionally, a kind has:

  task_weights(env) the configured weight of each task (what `env.adaptive` moves: rlexp.envs.adaptive)
  lengths(conf)     the prompt and turn lengths the memory and cost estimates take (rlexp.envs.lengths)

Rows carry `task`: the session reports per task `env/<task>/reward_mean`, errors and latency at each step, and the
eval `<task>/pass_at_1`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
from collections import defaultdict
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from rlexp.config.schema import AgentConfig, RlexpConfig
from rlexp.data.registry import Splits, load_splits
from rlexp.errors import ConfigError, RlexpError

KINDS = {
    "reasoning_gym": "rlexp.envs.reasoning_gym",
    "class": "rlexp.envs.user_class",
    "openenv": "rlexp.envs.openenv",
}


def close_match(key: str, value: str, choices: Iterable[str], what: str) -> ConfigError:
    """The one-line refusal of an unknown name, naming the closest known one."""
    choices = sorted(choices)
    near = difflib.get_close_matches(value, choices, n=1)
    hint = (
        f"did you mean {near[0]}?"
        if near
        else f"use one of {', '.join(choices[:12])}{' ...' if len(choices) > 12 else ''}"
    )
    return ConfigError(key, value, f"no such {what}; {hint}")


def episode_agent(conf: RlexpConfig) -> AgentConfig:
    """The agent of a kind whose episodes have turns: agent=tools' runner with the env's tools in place of the
    registry's; its agent.* keys where agent=tools is chosen, else 3 turns."""
    turns = conf.agent.max_turns if conf.agent.kind == "tools" else 3
    return dataclasses.replace(conf.agent, name=f"env:{conf.env.name}", kind="tools", tools=[], max_turns=turns)


def split_by_weight(weights: dict[str, float], total: int) -> dict[str, int]:
    """`total` rows split by weight (largest remainders first), at least one each."""
    whole = sum(weights.values())
    raw = {n: total * w / whole for n, w in weights.items()}
    out = {n: max(1, int(v)) for n, v in raw.items()}
    for n in sorted(raw, key=lambda n: raw[n] - int(raw[n]), reverse=True)[: max(0, total - sum(out.values()))]:
        out[n] += 1
    return out


def kind_module(conf: RlexpConfig) -> ModuleType | None:
    """The env kind's module, or None for env=none."""
    kind = conf.env.kind
    if kind == "none":
        return None
    if kind not in KINDS:
        raise close_match("env.kind", kind, [*KINDS, "none"], "environment kind")
    return importlib.import_module(KINDS[kind])


def check_env(conf: RlexpConfig) -> None:
    """The env's rules (rlexp.checks.check_rules calls this before anything heavy loads)."""
    module = kind_module(conf)
    if module is not None:
        module.check(conf.env)
    if conf.env.adaptive.enabled:
        from rlexp.envs.adaptive import check

        check(conf.env.adaptive, list(_task_weights(conf, module)), conf.trainer.num_generations)


def _task_weights(conf: RlexpConfig, module: ModuleType | None) -> dict[str, float]:
    """The env's tasks and their configured weights; refused for an env=adaptive run of a kind without tasks."""
    if module is None or not hasattr(module, "task_weights"):
        raise ConfigError(
            "env.adaptive.enabled", True, f"env={conf.env.kind} has no tasks to weigh; use env=reasoning_gym"
        )
    return module.task_weights(conf.env)


def run_lengths(conf: RlexpConfig) -> Any:
    """The env's prompt and turn lengths for the estimates (rlexp.estimates.lengths.Lengths), or None (the
    config's caps) for env=none and kinds that say nothing; rows that cannot be made end in one line."""
    from rlexp.envs.lengths import env_lengths

    try:
        return env_lengths(conf, kind_module(conf))
    except (RlexpError, KeyboardInterrupt):
        raise
    except Exception as err:  # noqa: BLE001 - a generator refusing its config: one line naming the env
        raise ConfigError(
            "env.tasks", conf.env.name, f"its rows cannot be made ({type(err).__name__}: {err})"
        ) from None


def adaptive_weights(conf: RlexpConfig) -> Any:
    """The run's adaptive task weights (rlexp.envs.adaptive.AdaptiveWeights), or None when env.adaptive is off."""
    if not conf.env.adaptive.enabled:
        return None
    from rlexp.envs.adaptive import AdaptiveWeights

    return AdaptiveWeights(conf.env.adaptive, _task_weights(conf, kind_module(conf)), conf.seed)


def resolve(conf: RlexpConfig) -> RlexpConfig:
    """The config a run with this env trains, evaluates and validates with (itself for env=none)."""
    module = kind_module(conf)
    if module is None:
        return conf
    module.check(conf.env)
    return module.resolve(conf)


def load_rows(conf: RlexpConfig, *, allow_downloads: bool = True) -> Splits:
    """The run's raw rows: the env's, or the dataset group's."""
    module = kind_module(conf)
    if module is None:
        return load_splits(conf.dataset, allow_downloads=allow_downloads)
    return module.rows(conf)


def tools_prompt(conf: RlexpConfig) -> str | None:
    """The system message offering the run's tools: the env kind's own (env=class: the class's methods), else
    agent=tools' registry tools (rlexp.tools.toolbox.tools_prompt)."""
    module = kind_module(conf)
    if module is not None and hasattr(module, "tools_prompt"):
        return module.tools_prompt(conf)
    from rlexp.tools.toolbox import tools_prompt as registry_prompt

    return registry_prompt(conf)


def toolbox(conf: RlexpConfig, rows: list[dict[str, Any]]) -> Any:
    """The episodes' tools where the env kind has its own (env=class), else None (agent.tools' ToolBox)."""
    module = kind_module(conf)
    return module.toolbox(conf, rows) if module is not None and hasattr(module, "toolbox") else None


def check_tasks_kept(raw: Splits, kept: Splits, max_prompt_tokens: int) -> None:
    """After the prompt-length filter: every env task still has train and eval rows, else one line naming the task
    (a run that silently trains on fewer tasks than configured measures the wrong thing)."""
    for split in ("train", "eval"):
        before = {str(r["task"]) for r in getattr(raw, split) if "task" in r}
        lost = sorted(before - {str(r.get("task")) for r in getattr(kept, split)})
        if lost:
            raise ConfigError(
                "trainer.max_prompt_tokens",
                max_prompt_tokens,
                f"every {split} prompt of task {lost[0]} is longer; raise it (model.max_context >= max_prompt_tokens"
                f" + trainer.max_completion_tokens) or make env.tasks.{lost[0]}.config's questions shorter",
            )


def dry_run(conf: RlexpConfig) -> list[dict[str, Any]]:
    """Per env task: {name, status, detail} (`rlexp validate`); [] for env=none."""
    module = kind_module(conf)
    return [] if module is None else module.dry_run(conf)


def task_metrics(tasks: Any, rewards: Any, errors: list[bool] | None, reward_set: Any) -> dict[str, float]:
    """A step's `env/<task>/reward_mean` (errored samples left out), `env/<task>/errors`, and the scorer's own
    per-task calls and latency where it counts them (`drain_tasks()`)."""
    out: dict[str, float] = {}
    if tasks is None:
        return out
    by_task: dict[str, list[float]] = defaultdict(list)
    errs: dict[str, int] = defaultdict(int)
    for i, (task, value) in enumerate(zip(tasks, rewards, strict=True)):
        bad = (errors is not None and errors[i]) or not math.isfinite(float(value))
        errs[str(task)] += bad
        if not bad:
            by_task[str(task)].append(float(value))
    for task in sorted(errs):
        vals = by_task[task]
        if vals:
            out[f"env/{task}/reward_mean"] = sum(vals) / len(vals)
        out[f"env/{task}/errors"] = float(errs[task])
    for r in getattr(reward_set, "rewards", []):
        drain = getattr(r.raw, "drain_tasks", None)
        if callable(drain):
            for task, stats in drain().items():
                out[f"env/{task}/latency_mean_s"] = stats["latency_mean_s"]
    return out


def task_summary(
    conf: RlexpConfig, train: list[dict[str, Any]], evals: list[dict[str, Any]], adaptive: Any = None
) -> dict[str, dict[str, Any]] | None:
    """summary.json's `data.tasks`: per task its configured weight and the train and eval rows it has (with
    env.adaptive, the weight it ended with): a sweep over the weights records each job's own. None for env=none."""
    module = kind_module(conf)
    if module is None:
        return None
    weights = module.task_weights(conf.env) if hasattr(module, "task_weights") else {}
    last = adaptive.weights() if adaptive is not None else {}
    out: dict[str, dict[str, Any]] = {}
    for task in sorted({str(r["task"]) for r in train + evals if "task" in r}):
        out[task] = {
            "weight": weights.get(task),
            "train_rows": sum(str(r.get("task")) == task for r in train),
            "eval_rows": sum(str(r.get("task")) == task for r in evals),
        }
        if task in last:
            out[task]["adaptive_weight"] = last[task]
    return out


def task_pass_at_1(rows: list[dict[str, Any]], correct: list[bool]) -> dict[str, float]:
    """The eval's `<task>/pass_at_1` (mean correctness of the sampled completions) per task; {} without tasks."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for row, ok in zip(rows, correct, strict=True):
        if "task" in row:
            by_task[str(row["task"])].append(bool(ok))
    return {f"{t}/pass_at_1": sum(v) / len(v) for t, v in sorted(by_task.items())}
