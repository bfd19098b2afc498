"""Checks before heavy work: every rule a config must pass, and the data/reward/sampling preflight.

`check_config` is the one call the entry points and the launchers make before anything is loaded (a run's
plan, rlexp.train.plan, makes it in two halves: `check_values`, then `check_rules`): the algorithm's rules
(`rlexp.algorithms.registry.check_algorithm`: the shared ones and its spec's), the config layer's rules
(types, ranges, mesh, context length), the model family's (`rlexp.families.rules`), the memory fit
(`rlexp.estimates.memory.check_fits`), plus the names that only the registries of the data and reward layers
know. The preflight (`rlexp.checks.data_preflight`)
then loads rows and renders prompts, and `rlexp.checks.reward_preflight` scores completions.
"""

from __future__ import annotations

from typing import Any

from rlexp.algorithms.registry import check_algorithm
from rlexp.config.schema import RlexpConfig
from rlexp.config.validate import check_rules as check_config_rules
from rlexp.config.values import check_values
from rlexp.data.registry import known_loaders
from rlexp.errors import ConfigError
from rlexp.estimates.memory import check_fits
from rlexp.families.rules import check_family
from rlexp.rewards.registry import check_kwargs, known_reward_fns


def check_config(cfg: RlexpConfig) -> dict[str, Any]:
    """Raise ConfigError on the first broken rule; when the config is runnable, return the memory estimate
    (rlexp.estimates.memory) it was checked against."""
    check_values(cfg)
    return check_rules(cfg)


def check_rules(cfg: RlexpConfig) -> dict[str, Any]:
    """`check_config` once `check_values` passed (rlexp.train.plan checks the values first, before it asks
    whether a remote launcher takes the job); returns the memory estimate."""
    check_algorithm(cfg)  # trainer.algorithm's spec: its keys, its models (OPD's teacher), its rules
    check_config_rules(cfg)  # the config layer's rules across keys
    check_family(cfg)  # source, family, extras, base vs -it hub id, what the family's implementation supports
    loaders = known_loaders()
    if cfg.dataset.loader not in loaders:
        raise ConfigError("dataset.loader", cfg.dataset.loader, f"use one of {', '.join(sorted(loaders))}")
    known = known_reward_fns()
    for i, f in enumerate(cfg.reward.functions):
        if f.fn not in known:
            raise ConfigError(f"reward.functions[{i}].fn", f.fn, f"use one of {', '.join(sorted(known))}")
        check_kwargs(f.fn, f.kwargs, f"reward.functions[{i}].kwargs")  # e.g. reward=code: the snippet parses
    from rlexp.envs import check_env

    check_env(cfg)  # env=reasoning_gym: its task names and config keys; env=class: the class and its tools
    if cfg.agent.kind == "tools":
        from rlexp.tools.toolbox import check_tools

        check_tools(cfg.agent.tools)  # a tool that does not exist, an http tool without its url
    # chips of known memory only (TPU/GPU slices); the message carries the numbers. After the env's rules: its
    # prompts and turns size the estimate
    return check_fits(cfg, run_lengths(cfg))


def run_lengths(cfg: RlexpConfig) -> Any:
    """The sequence lengths the estimates take: the env's (rlexp.envs.lengths), else None (the config's caps)."""
    from rlexp.envs import run_lengths as env_run_lengths

    return env_run_lengths(cfg)


def estimates(cfg: RlexpConfig, memory: dict[str, Any] | None = None) -> dict[str, Any]:
    """The memory and cost estimates a run is planned with (rlexp.train.plan) and `rlexp validate` reports
    (`memory`: the one the config's rules were checked against). A cost that cannot be estimated (a calibration
    run dir that went away) is {"error": ...}: the run itself is fine."""
    from rlexp.estimates.cost import estimate_cost
    from rlexp.estimates.memory import estimate_memory

    lengths = run_lengths(cfg)
    try:
        cost: dict[str, Any] = estimate_cost(cfg, lengths)
    except ConfigError as err:
        cost = {"error": str(err)}
    return {"memory": memory if memory is not None else estimate_memory(cfg, lengths), "cost": cost}
