"""The keys the schemas declare: refuse any other (`+trainer.learning_rat=...`), suggest the nearest real one.

Hydra lets `+key=value` add a key that no schema declares, and the run would train with the typo ignored.
Keys under the free-form dict fields (`model.extra`, `dataset.params`, `reward.functions[i].kwargs`,
`hydra.launcher.env`) stay open. Pure Python: no JAX.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import typing
from typing import Any

from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError

# Names people carry over from other trainers.
ALIASES = {
    "path": "source",
    "file": "source",
    "lr": "learning_rate",
    "steps": "max_steps",
    "bs": "batch_size",
    "kl": "beta",
    "kl_coef": "beta",
    "kl_method": "kl_estimator",  # trainer.ppo.kl_method became trainer.kl_estimator (one key for every algorithm)
}

# Keys that moved into an algorithm's node (rlexp.algorithms): the old key (or a node below it) -> the new one.
# A config or override that still sets one is refused in one line naming the new key.
MOVED = {
    "trainer.epsilon_high": "trainer.dapo.epsilon_high",
    "trainer.dynamic_sampling": "trainer.dapo.dynamic_sampling",
    "trainer.overlong": "trainer.dapo.overlong",
}


def moved_to(key: str) -> str | None:
    """The key `key` moved to (`trainer.overlong.penalty` -> trainer.dapo.overlong.penalty); None if it did not."""
    plain = re.sub(r"\[\d+\]", "", key.lstrip("+~"))
    for old, new in MOVED.items():
        if plain == old or plain.startswith(old + "."):
            return new + plain[len(old) :]
    return None


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _element_dataclass(hint: Any) -> type | None:
    """The dataclass a field holds (directly, optionally, or as list items); None for plain values."""
    if dataclasses.is_dataclass(hint):
        return hint  # type: ignore[return-value]
    for arg in typing.get_args(hint):
        found = _element_dataclass(arg)
        if found is not None:
            return found
    return None


@functools.cache
def declared_keys(root: type = RlexpConfig) -> tuple[str, ...]:
    """Every dotted key the schema declares (list items as `[i]`-less paths), sorted."""
    out: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        for name, hint in _field_types(cls).items():
            key = f"{prefix}{name}"
            out.append(key)
            inner = _element_dataclass(hint)
            if inner is not None:
                walk(inner, key + ".")

    walk(root, "")
    return tuple(sorted(out))


def nearest_key(key: str, root: type = RlexpConfig) -> str | None:
    """The declared key closest to a misspelt one: a sibling with a similar name, the same name in another
    group (`trainer.dtype` -> model.dtype), or any similar key."""
    keys = declared_keys(root)
    parent, _, leaf = key.rpartition(".")
    leaf = ALIASES.get(leaf, leaf)
    plain_parent = re.sub(r"\[\d+\]", "", parent)
    siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == plain_parent]
    match = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.7)
    if match:
        return f"{parent}.{match[0]}" if parent else match[0]
    same_leaf = [k for k in keys if k.rpartition(".")[2] == leaf]
    if same_leaf:
        return same_leaf[0]
    match = difflib.get_close_matches(re.sub(r"\[\d+\]", "", key), keys, n=1, cutoff=0.85)
    return match[0] if match else None


def key_fix(key: str, root: type = RlexpConfig) -> str:
    """What to type instead of an undeclared key: the nearest declared one, or where to see them all."""
    near = nearest_key(key.lstrip("+~"), root)
    return f"did you mean {near}?" if near else "run python -m rlexp --cfg job to see every key"


def unknown_key_error(key: str, value: Any, root: type = RlexpConfig) -> ConfigError:
    new = moved_to(key) if root is RlexpConfig else None
    if new is not None:
        return ConfigError(key.lstrip("+~"), value, f"moved: use {new}")
    return ConfigError(key.lstrip("+~"), value, f"no such key; {key_fix(key, root)}")


class SchemaField(typing.NamedTuple):
    """Where a dotted key lands in the schema: the dataclass holding its last part, that part, its type hint, and
    whether every part is a dataclass field (the key then exists in every composed config; a list item need not)."""

    owner: type
    name: str
    hint: Any
    fixed: bool


def schema_field(key: str, value: Any, root: type = RlexpConfig) -> SchemaField | None:
    """The field a dotted key (`trainer.lora.rank`, `reward.functions.0.weight`) sets; None where the key enters a
    free-form dict, an `Any` or a list of plain values, whose keys only the composed config knows. Raises
    ConfigError naming the key at the first part no schema declares, or at a part below a plain value."""
    hint: Any = root
    owner, name, fixed = root, "", True
    parts = key.split(".")
    for i, part in enumerate(parts):
        cls = _element_dataclass(hint) if not _is_list(hint) else None
        if cls is not None:
            hints = _field_types(cls)
            if part not in hints:
                raise unknown_key_error(key, value, root)
            owner, name, hint = cls, part, hints[part]
        elif _is_list(hint) and part.isdigit() and _element_dataclass(hint) is not None:
            hint, fixed = _element_dataclass(hint), False  # an item of a list of dataclasses: its fields are known
        elif _is_open(hint) or _is_list(hint):
            return None
        else:
            parent = ".".join(parts[:i])
            raise ConfigError(key, value, f"{parent} holds one value, not keys; set {parent}=<value>")
    return SchemaField(owner, name, hint, fixed)


def _is_list(hint: Any) -> bool:
    return any(typing.get_origin(h) is list for h in (hint, *typing.get_args(hint)))


def _is_open(hint: Any) -> bool:
    """A free-form dict or an untyped value: any key may be below it."""
    return hint is Any or any(typing.get_origin(h) is dict or h is Any for h in (hint, *typing.get_args(hint)))


def _shown(node: Any) -> Any:
    from omegaconf import DictConfig, ListConfig

    return "{...}" if isinstance(node, DictConfig) else "[...]" if isinstance(node, ListConfig) else node._value()


def check_declared(cfg: Any, root: type = RlexpConfig) -> None:
    """Raise ConfigError naming the first key of a composed DictConfig that its schema does not declare."""
    from omegaconf import DictConfig, ListConfig

    def walk(node: Any, cls: type, prefix: str) -> None:
        hints = _field_types(cls)
        for name in node.keys() if isinstance(node, DictConfig) else ():
            key = f"{prefix}{name}"
            if name not in hints:
                raise unknown_key_error(key, _shown(node._get_node(name)))
            inner = _element_dataclass(hints[name])
            child = node._get_node(name)
            if inner is None or child is None or child._is_none() or child._is_missing():
                continue
            if child._is_interpolation():
                continue
            if isinstance(child, ListConfig):
                for i, item in enumerate(child):
                    if isinstance(item, DictConfig):
                        walk(item, inner, f"{key}[{i}].")
            elif isinstance(child, DictConfig):
                walk(child, inner, key + ".")

    walk(cfg, root, "")
