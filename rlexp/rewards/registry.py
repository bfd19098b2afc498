"""Registry of reward-function factories, keyed by the name used in `conf/reward/*.yaml`.

A factory takes the option's `kwargs` and returns a scorer with Tunix's reward signature,
`fn(prompts, completions, **batch_fields) -> list[float]`; batch fields such as `answer`
arrive repeated once per completion. Registering a new reward is one decorated function.
Modules that define rewards are listed in `_BUILTIN_MODULES` and imported lazily. A factory may register a
`check(key, kwargs)`: the config check calls it (cheap, before JAX) to refuse kwargs in one line.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

RewardFn = Callable[..., list[float]]
_FACTORIES: dict[str, Callable[..., RewardFn]] = {}
_CHECKS: dict[str, Callable[[str, dict[str, Any]], None]] = {}  # name -> check(key, kwargs), run before loading
_PROBES: dict[str, Callable[[str, dict[str, Any]], None]] = {}  # name -> probe(key, kwargs): is its service up
_BUILTIN_MODULES = (
    "rlexp.rewards.arith",
    "rlexp.rewards.math_rewards",
    "rlexp.rewards.http_reward",
    "rlexp.rewards.python_reward",
    "rlexp.rewards.maxtext",
    "rlexp.rewards.code",
    "rlexp.rewards.judge",
    "rlexp.rewards.string_match",
    "rlexp.rewards.reasoning_gym",
)


def register(
    name: str,
    check: Callable[[str, dict[str, Any]], None] | None = None,
    probe: Callable[[str, dict[str, Any]], None] | None = None,
) -> Callable[[Callable[..., RewardFn]], Callable[..., RewardFn]]:
    """Decorator: make a reward factory available as `fn: <name>` in reward configs.

    `check(key, kwargs)`, when given, raises a ConfigError for bad kwargs; `check_kwargs` runs it
    with the rest of the config's rules, before anything heavy loads. `probe(key, kwargs)`, when given, raises a
    RunError when a service the reward needs does not answer; a training run calls it before loading weights.
    """

    def deco(factory: Callable[..., RewardFn]) -> Callable[..., RewardFn]:
        if name in _FACTORIES and _FACTORIES[name] is not factory:
            raise ValueError(f"reward function {name!r} is registered twice")
        _FACTORIES[name] = factory
        if check is not None:
            _CHECKS[name] = check
        if probe is not None:
            _PROBES[name] = probe
        return factory

    return deco


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def known_reward_fns() -> set[str]:
    _load_builtins()
    return set(_FACTORIES)


def check_kwargs(name: str, kwargs: dict[str, Any] | None, key: str) -> None:
    """Run the reward's own config check (if it registered one) on its kwargs; `key` names them in errors."""
    _load_builtins()
    if name in _CHECKS:
        _CHECKS[name](key, dict(kwargs or {}))


def probe_services(functions: list[Any]) -> None:
    """Ask the service of every reward that has one (the judge's endpoint) whether it answers; RunError if not."""
    _load_builtins()
    for i, f in enumerate(functions):
        if f.fn in _PROBES:
            _PROBES[f.fn](f"reward.functions[{i}].kwargs", dict(f.kwargs or {}))


def make_reward_fn(name: str, kwargs: dict[str, Any] | None = None) -> RewardFn:
    """Build one scorer; unknown names and keyword arguments the factory does not take are ConfigErrors."""
    from rlexp.errors import ConfigError

    _load_builtins()
    if name not in _FACTORIES:
        raise ConfigError("reward.functions[].fn", name, f"use one of {', '.join(sorted(_FACTORIES))}")
    factory = _FACTORIES[name]
    try:
        inspect.signature(factory).bind(**(kwargs or {}))
    except TypeError as err:
        raise ConfigError(
            f"reward {name} kwargs", dict(kwargs or {}), f"{err}; the factory takes {inspect.signature(factory)}"
        ) from err
    return factory(**(kwargs or {}))
