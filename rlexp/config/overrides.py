"""The command line's overrides, checked before Hydra composes: grammar, groups and options, keys, value types.

Each mistake found here ends in one ConfigError naming the override and the fix, from rlexp's own rules: Hydra's
public override parser reads the grammar (its typed OverrideParseException, never its text), `conf/<group>/*.yaml`
lists a group's options, the schema dataclasses (rlexp.config.schema, through rlexp.config.keys) declare the keys,
and OmegaConf's value nodes convert a value exactly as composing will. A Hydra or OmegaConf release that rewords its
exceptions changes none of these messages; what only composing can find (keys of free-form dicts, interpolations)
is still translated from Hydra's text by rlexp.cli, each text pinned by tests/cli/test_hydra_texts.py.
Pure Python: no JAX (`--cfg job` runs it).
"""

from __future__ import annotations

import difflib
import functools
import re
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rlexp.config.keys import key_fix, schema_field
from rlexp.config.values import eval_k_refusal
from rlexp.errors import ConfigError, RlexpError

GRAMMAR_FIX = "write key=value, a sweep as key=a,b or key=range(1,4), and quote values holding , ( ) [ ] { } or spaces"
_KINDS = {int: "an integer", float: "a float", bool: "true or false", str: "a string"}
_LISTS = {int: "integers, e.g. [1,2]", float: "floats, e.g. [0.5,1]", bool: "booleans, e.g. [true,false]"}
_LISTS[str] = "strings, e.g. [a,b]"
# keys the schema types `Any` because OmegaConf has no type for what they take: the reason a value is refused
OWN_CHECKS = {"trainer.eval_k": eval_k_refusal}
# the groups whose options set `hydra.mode` (the sweep presets: MULTIRUN); tests/compat/test_compose_once.py scans
# conf/ and the launchers' configs for any other
MODE_GROUPS = ("sweep",)


def may_set_hydra_mode(overrides: Sequence[str]) -> bool:
    """Whether composing rlexp's config with these overrides can set `hydra.mode`: an override of `hydra.mode`,
    of Hydra's config search path (configs from elsewhere), an option of a group in MODE_GROUPS, a `key@package`
    or an override the parser refuses. False means the composed config sets no mode (rlexp.compat.hydra.compose_once)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except OverrideParseException:
            return True
        key = override.key_or_group
        if override.package is not None or key in MODE_GROUPS or key.startswith(("hydra.mode", "hydra.searchpath")):
            return True
    return False


def check_overrides(overrides: Sequence[str], conf_dir: str, *, multirun: bool = False) -> None:
    """Refuse the first override that composing `conf_dir`'s config.yaml with them would refuse for its grammar,
    its group or option, its key or its value's type (ConfigError, exit status 2). Anything it cannot judge
    without composing (a key of a free-form dict, an interpolation, a `hydra.*` key) is left to Hydra.

    A multirun is checked here for its grammar and options only: its sweeper composes each job, and a job a key or
    value refuses is recorded as failed in sweep.json (rlexp.launch.compose, rlexp.launch.sweep_checks)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType, ValueType
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except OverrideParseException:
            raise grammar_error(text) from None
        if override.is_hydra_override() or override.package is not None:
            continue  # Hydra's own keys and `key@package=`: Hydra checks them
        key, raw = override.key_or_group, text.partition("=")[2]
        if override.is_sweep_override() and not multirun:
            raise RlexpError(
                f"{key}={raw}: a sweep, one job per value; add -m (--multirun) to run them, or give one value"
            )
        if override.value_type in (ValueType.GLOB_CHOICE_SWEEP, ValueType.RANGE_SWEEP, ValueType.INTERVAL_SWEEP):
            continue  # expanded by the sweeper, which checks what they give (rlexp.launch.sweep_checks)
        if key in groups(conf_dir):
            _check_group(key, override, raw, conf_dir)
        elif multirun:
            continue  # a sweep's keys and values: checked as each job is composed, recorded in sweep.json
        elif override.type == OverrideType.DEL:
            _check_delete(key)
        else:
            _check_key(key, override, raw, added=override.type == OverrideType.ADD)


def grammar_error(override: str) -> RlexpError:
    """An override Hydra's grammar refuses, with what rlexp sees wrong in it."""
    key, eq, value = override.partition("=")
    if not eq and not key.startswith("~"):
        reason = "no = between the key and its value"
    elif any(value.count(o) != value.count(c) for o, c in ("()", "[]", "{}")):
        reason = "a bracket left open"
    elif ",," in value or value.startswith(",") or value.rstrip().endswith(","):
        reason = "an empty item in a list of values"
    elif value.count("'") % 2 or value.count('"') % 2:
        reason = "a quote left open"
    else:
        reason = "Hydra's override grammar cannot read it"
    return RlexpError(f"{override}: not a valid override ({reason}); {GRAMMAR_FIX}")


def option_error(group: str, option: Any, known: Sequence[str]) -> ConfigError:
    """An option a group does not have, with the nearest one and the whole list (schemas left out)."""
    shown = _shown(known)
    near = difflib.get_close_matches(str(option), shown, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    return ConfigError(group, option, f"no such option; {hint}use one of {', '.join(shown)}")


@functools.cache
def groups(conf_dir: str) -> frozenset[str]:
    """rlexp's config groups: the folders of conf/ (Hydra's own, `hydra/...`, are Hydra's to check)."""
    return frozenset(p.name for p in Path(conf_dir).iterdir() if p.is_dir() and p.name != "hydra")


@functools.cache
def options(conf_dir: str, group: str) -> tuple[str, ...]:
    """A group's options: its YAML files and what rlexp registers for it in Hydra's ConfigStore, sorted."""
    from hydra.core.config_store import ConfigStore

    folder = Path(conf_dir, group)
    names = {p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml")}
    try:
        names |= {n.removesuffix(".yaml") for n in ConfigStore.instance().list(group)}
    except OSError:  # no node registered for this group
        pass
    return tuple(sorted(names))


@functools.cache
def _defaults(conf_dir: str) -> dict[str, Any]:
    """Group -> default option of config.yaml's defaults list."""
    import yaml

    listed = yaml.safe_load(Path(conf_dir, "config.yaml").read_text()).get("defaults", [])
    return {k: v for item in listed if isinstance(item, dict) for k, v in item.items()}


def _choices(override: Any) -> Iterator[Any]:
    """The values an override gives: one, or each of a choice sweep's."""
    from hydra.core.override_parser.types import ChoiceSweep

    value = override.value()
    yield from value.list if isinstance(value, ChoiceSweep) else [value]


def _check_group(group: str, override: Any, raw: str, conf_dir: str) -> None:
    from hydra.core.override_parser.types import OverrideType

    if override.type == OverrideType.DEL:
        return
    defaults = _defaults(conf_dir)
    if group not in defaults and override.type == OverrideType.CHANGE:
        raise ConfigError(group, raw, f"{group} is not in the defaults list; add it with +{group}={raw}")
    known = options(conf_dir, group)
    for value in _choices(override):
        for option in value if isinstance(value, list) else [value]:
            if option is None or isinstance(option, dict):
                drop = f", or leave it out with ~{group}" if defaults.get(group, "") is None else ""
                fix = f"a group takes one option's name; use one of {', '.join(_shown(known))}{drop}"
                raise ConfigError(group, option, fix)
            if str(option) not in known:
                raise option_error(group, str(option), known)


def _shown(known: Sequence[str]) -> list[str]:
    return [o for o in known if not o.endswith("_schema")]


def _check_delete(key: str) -> None:
    try:
        found = schema_field(key, None)
    except ConfigError:
        raise RlexpError(f"{key}: cannot delete it, no such key; {key_fix(key)}") from None
    if found is not None and found.fixed:
        raise RlexpError(f"~{key}: a key of the schema cannot be deleted; set it to another value (null where allowed)")


def _check_key(key: str, override: Any, raw: str, *, added: bool) -> None:
    # the value as the user sees it: as typed, or (a `+key`, which Hydra adds parsed) as parsed
    shown = override.value() if added and not override.is_sweep_override() else raw
    found = schema_field(key, shown)
    if found is None:
        return
    if added and found.fixed:
        raise RlexpError(f"{key}={raw}: the key exists already; set it without the + ({key}={raw})")
    own_check = OWN_CHECKS.get(key)
    if own_check is not None:  # an `Any` field with a type of rlexp's own (rlexp.config.values)
        for value in _choices(override):
            reason = None if isinstance(value, str) and "${" in value else own_check(value)
            if reason is not None:
                raise ConfigError(key, raw if not override.is_sweep_override() else _typed_text(value), reason)
        return
    kind = value_kind(found.hint)
    if kind is None:
        return  # a dataclass node, a list of them: what they accept is composing's to judge
    for value in _choices(override):
        if isinstance(value, str) and ("${" in value or value == "???"):
            continue  # resolved, or refused as unset, once composed
        reason = _refused(found.owner, found.name, value)
        if reason is not None:
            given = raw if not override.is_sweep_override() else _typed_text(value)
            raise ConfigError(key, given, f"{reason}; give {kind}")


def type_fix(key: str) -> str:
    """What a key takes, as the fix of a value it refused (`give a float`); where to look when it is no plain field."""
    try:
        found = schema_field(re.sub(r"\[(\d+)\]", r".\1", key), None)  # OmegaConf's `functions[0]` is our `.0`
    except ConfigError:
        found = None
    kind = value_kind(found.hint) if found is not None else None
    return f"give {kind}" if kind else "see python -m rlexp --cfg job for the key's type"


def _typed_text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def value_kind(hint: Any) -> str | None:
    """How to describe the values a plain field takes (`a float or null`); None for other fields (dataclasses,
    dicts, lists of those)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = len(args) < len(typing.get_args(hint))
    base = args[0] if optional and len(args) == 1 else hint
    if typing.get_origin(base) is list:
        (item,) = typing.get_args(base) or (None,)
        text = f"a list of {_LISTS[item]}" if item in _LISTS else None
    else:
        text = _KINDS.get(base)
    return f"{text} or null" if text and optional else text


def _refused(owner: type, name: str, value: Any) -> str | None:
    """OmegaConf's reason for refusing `value` in the field (None: accepted), as composing would refuse it."""
    from omegaconf.errors import ValidationError

    node = _field_node(owner, name)
    try:
        node[name] = value
    except ValidationError as err:
        return str(err).strip().splitlines()[0].strip() or type(err).__name__
    return None


@functools.cache
def _field_node(owner: type, name: str) -> Any:
    """A structured node of the one field, typed as in `owner`: OmegaConf checks a value against the field's type
    alone, and building the whole group's node for each override took 11 ms (trainer)."""
    import dataclasses

    from omegaconf import OmegaConf

    hint = typing.get_type_hints(owner)[name]
    return OmegaConf.structured(dataclasses.make_dataclass(owner.__name__, [(name, hint)]))
