"""Checks before heavy work: every rule a config must pass, and the data/reward/sampling preflight.

`check_config` is the one call the entry points, the launchers and the trainer make before anything
is loaded: the config layer's rules (types, ranges, mesh, context length), the model family's
(`rlexp.families.rules`), the memory fit (`rlexp.estimates.memory.check_fits`), plus the names that only the
registries of the data and reward layers know. The preflight (`rlexp.checks.data_preflight`)
then loads rows and renders prompts, and `rlexp.checks.reward_preflight` scores completions.
"""

from __future__ import annotations

from rlexp.config.schema import RlexpConfig
from rlexp.config.validate import validate
from rlexp.data.registry import known_loaders
from rlexp.errors import ConfigError
from rlexp.estimates.memory import check_fits
from rlexp.families.rules import check_family
from rlexp.rewards.registry import check_kwargs, known_reward_fns


def check_rules(cfg: RlexpConfig) -> None:
    """The rules a config alone decides: the config layer's, the model family's, and whether it fits the chips."""
    validate(cfg)
    check_family(cfg)  # source, family, extras, base vs -it hub id, what the family's implementation supports
    check_fits(cfg)  # chips of known memory only (TPU/GPU slices); the message carries the numbers


def check_config(cfg: RlexpConfig) -> None:
    """Raise ConfigError on the first broken rule; return None when the config is runnable."""
    check_rules(cfg)
    loaders = known_loaders()
    if cfg.dataset.loader not in loaders:
        raise ConfigError("dataset.loader", cfg.dataset.loader, f"use one of {', '.join(sorted(loaders))}")
    known = known_reward_fns()
    for i, f in enumerate(cfg.reward.functions):
        if f.fn not in known:
            raise ConfigError(f"reward.functions[{i}].fn", f.fn, f"use one of {', '.join(sorted(known))}")
        check_kwargs(f.fn, f.kwargs, f"reward.functions[{i}].kwargs")  # e.g. reward=code: the snippet parses
    if cfg.agent.kind == "tools":
        from rlexp.tools.toolbox import check_tools

        check_tools(cfg.agent.tools)  # a tool that does not exist, an http tool without its url
