"""Registry of RL algorithms, keyed by `trainer.algorithm`: one `register(AlgorithmSpec(...))` per algorithm module,
and the rules every algorithm shares.

The builtin algorithms are the modules of this package (each one holds `SPEC = register(...)`), found and imported
on first use: adding one is adding its module and its `conf/trainer/<name>.yaml`. An algorithm registered from
anywhere else (a test, a user's package) is asked the same questions. Pure Python.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator
from typing import Any

from rlexp.algorithms import correction, off_policy
from rlexp.algorithms.spec import AlgorithmSpec, LearnerInputs
from rlexp.config.derived import tunix_kl_mode
from rlexp.config.schema import RlexpConfig, TrainerConfig
from rlexp.discover import spec_modules
from rlexp.errors import ConfigError

__all__ = [
    "AlgorithmSpec",
    "LearnerInputs",
    "algorithm_of",
    "algorithms",
    "check_algorithm",
    "check_keys",
    "extra_forward_passes",
    "reference_copy",
    "register",
    "unregister",
]

_ALGORITHMS: dict[str, AlgorithmSpec] = {}
# the builtin modules in the order `trainer.algorithm`'s error lists them
_FIRST = ("grpo", "dapo", "drgrpo", "gspo", "ppo")


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Make `spec` the algorithm `trainer.algorithm=<spec.name>`; returns it (a module keeps `SPEC = register(...)`)."""
    old = _ALGORITHMS.get(spec.name)
    if old is not None and old is not spec:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    _ALGORITHMS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Forget an algorithm (tests that register one of their own)."""
    _ALGORITHMS.pop(name, None)


def algorithms() -> dict[str, AlgorithmSpec]:
    """Every registered algorithm by name, the builtin ones first (the package's modules that declare a SPEC,
    rlexp.discover)."""
    builtin = [m.rpartition(".")[2] for m in spec_modules("rlexp.algorithms", _FIRST)]
    for name in builtin:
        importlib.import_module(f"rlexp.algorithms.{name}")
    order = {n: i for i, n in enumerate(builtin)}
    return dict(sorted(_ALGORITHMS.items(), key=lambda kv: order.get(kv[0], len(order))))


def algorithm_of(t: TrainerConfig) -> AlgorithmSpec:
    """The spec of trainer.algorithm; ConfigError naming the known ones when there is none."""
    known = algorithms()
    if t.algorithm not in known:
        raise ConfigError("trainer.algorithm", t.algorithm, f"use one of {', '.join(known)}")
    return known[t.algorithm]


def extra_forward_passes(t: TrainerConfig) -> float:
    """Policy forward passes per token beyond rollout, reference and update: the algorithm's own, and the
    trainer's scoring of each rollout that trainer.correction adds (rlexp.algorithms.correction)."""
    return algorithm_of(t).extra_forward_passes(t) + (1.0 if correction.enabled(t) else 0.0)


def reference_copy(t: TrainerConfig) -> bool:
    """Whether a second copy of the policy's weights (rlexp.families.load.copy_model) is the reference: the algorithm
    needs one, brings no model of its own for that role, and no LoRA base (the frozen base the adapters sit on is
    the reference) serves."""
    spec = algorithm_of(t)
    return spec.needs_reference(t) and spec.load_reference is None and t.lora.rank == 0


def _changed(node: Any, default: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of each leaf of a node that differs from the node's default."""
    for f in dataclasses.fields(node):
        value, was = getattr(node, f.name), getattr(default, f.name)
        if dataclasses.is_dataclass(value) and dataclasses.is_dataclass(was):
            yield from _changed(value, was, f"{prefix}.{f.name}")
        elif value != was:
            yield f"{prefix}.{f.name}", value


def check_keys(t: TrainerConfig) -> AlgorithmSpec:
    """The rules of single trainer keys every algorithm shares (its KL coefficient, no key of another algorithm's
    node), then the spec's own; returns the spec. `--cfg job` runs these."""
    spec = algorithm_of(t)
    if not spec.has_kl and t.beta is not None:
        raise ConfigError(
            "trainer.beta", t.beta, f"{t.algorithm} has no KL term; drop the key (or pick trainer=grpo for a KL)"
        )
    if spec.has_kl and t.beta is None:
        raise ConfigError("trainer.beta", None, f"{t.algorithm} needs a KL coefficient: use 0 for none, e.g. 0.04")
    if t.beta is not None and t.beta < 0:
        raise ConfigError("trainer.beta", t.beta, "must be >= 0")
    if spec.has_kl:
        tunix_kl_mode(t)  # trainer.kl_estimator names one Tunix has
    for other in algorithms().values():
        if other.node is None or other.node == spec.node:
            continue
        node = getattr(t, other.node)
        for key, value in _changed(node, type(node)(), f"trainer.{other.node}"):
            raise ConfigError(
                key, value, f"{other.name}'s key: set trainer={other.name}, or leave it unset for {t.algorithm}"
            )
    correction.check_keys(t)
    if correction.enabled(t) and not spec.corrects_rollout:
        able = [name for name, s in algorithms().items() if s.corrects_rollout]
        raise ConfigError(
            "trainer.correction.mode",
            t.correction.mode,
            f"{t.algorithm}'s loss takes no per-token importance weight; use none, or one of {', '.join(able)}",
        )
    off_policy.check_keys(t)
    spec.check_keys(t)
    return spec


def check_algorithm(cfg: RlexpConfig) -> AlgorithmSpec:
    """Every rule of trainer.algorithm (rlexp.checks.check_rules runs it): the shared ones, what agent=tools and a
    critic ask of it, then the spec's own rules across groups; returns the spec."""
    from rlexp.families.rules import check_critic

    t = cfg.trainer
    spec = check_keys(t)
    if cfg.agent.kind == "tools" and not spec.takes_episodes:
        able = [name for name, s in algorithms().items() if s.takes_episodes]
        raise ConfigError(
            "trainer.algorithm",
            t.algorithm,
            f"agent=tools trains with {', '.join(able)} (the others' learners do not take the episode mask yet); "
            "use one of them",
        )
    if cfg.agent.kind == "tools" and correction.enabled(t):
        raise ConfigError(
            "trainer.correction.mode",
            t.correction.mode,
            "agent=tools' episodes carry no sampler log-probabilities (tool outputs are not sampled); use none",
        )
    off_policy.check(cfg, spec.needs_critic)
    if spec.needs_critic:
        check_critic(cfg.model, t.algorithm)
    spec.check(cfg)
    return spec
