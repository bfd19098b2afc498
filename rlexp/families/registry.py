"""Registry of model families, keyed by `model.family`: one `register(FamilySpec(...))` per family module.

The package's modules that declare a `SPEC = register(...)` are the builtin families, found and imported on first
use (rlexp.discover): a new family is one module and its YAML; a family registered from anywhere else (a test, a user's package) is asked the same
questions. Pure Python: a spec imports its model code only when it builds a model.
"""

from __future__ import annotations

import importlib

from rlexp.config.schema import ModelConfig
from rlexp.discover import spec_modules
from rlexp.errors import ConfigError, RlexpError
from rlexp.families.spec import FamilySpec

__all__ = ["FamilySpec", "family_of", "family_of_model_type", "families", "register", "unregister"]

_FAMILIES: dict[str, FamilySpec] = {}
_FIRST = ("qwen3", "llama3", "gemma4", "gpt_oss")  # the builtin families in this order; any other module after


def register(spec: FamilySpec) -> FamilySpec:
    """Make `spec` the family `model.family=<spec.name>`; returns it, so a module can keep `SPEC = register(...)`."""
    old = _FAMILIES.get(spec.name)
    if old is not None and old is not spec:
        raise ValueError(f"model family {spec.name!r} is registered twice")
    taken = {t: f.name for f in _FAMILIES.values() if f is not old for t in f.hf_model_types}
    clash = [t for t in spec.hf_model_types if t in taken]
    if clash:
        raise ValueError(f"model_type {clash[0]!r} of family {spec.name!r} is family {taken[clash[0]]!r}'s")
    _FAMILIES[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Forget a family (tests that register one of their own)."""
    _FAMILIES.pop(name, None)


def _load_builtins() -> None:
    for module in spec_modules("rlexp.families", _FIRST):  # the package's modules that declare a SPEC
        importlib.import_module(module)


def families() -> dict[str, FamilySpec]:
    """Every registered family by name, the builtin ones first."""
    _load_builtins()
    return dict(_FAMILIES)


def family_of(m: ModelConfig) -> FamilySpec:
    """The spec of the option's family; ConfigError naming the known ones when there is none."""
    known = families()
    if m.family not in known:
        raise ConfigError("model.family", m.family, f"use one of {', '.join(known)}")
    return known[m.family]


def family_of_model_type(model_type: str) -> FamilySpec:
    """The family that loads a config.json of this `model_type`."""
    known = families()
    for spec in known.values():
        if model_type in spec.hf_model_types:
            return spec
    types = [t for spec in known.values() for t in spec.hf_model_types]
    raise RlexpError(f"config.json model_type={model_type!r} is not supported; supported: {', '.join(types)}")
