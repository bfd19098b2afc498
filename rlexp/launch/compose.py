"""Compose the jobs of a sweep quickly: jobs that differ only in leaf values share one Hydra composition.

Hydra composes every job from scratch (defaults tree, YAML loads, schema merges), ~0.1-0.6 s each, and its
basic sweeper does it once more per job to validate the batch. In a sweep most jobs differ only in values such
as `trainer.learning_rate=3e-6`, which Hydra applies after composing, exactly as
rlexp.compat.hydra.apply_value_overrides does here. So each distinct structural combination (group choices,
appends, deletions, keys that are not existing leaves) is composed once, and a job's leaf overrides are
applied to that shared composition, read back and undone: the same type checks and conversions as Hydra's,
without copying a DictConfig per job. Jobs Hydra would place elsewhere (a sweep subdir that depends on more
than the job number, a sweep dir that depends on a changed key) take Hydra's full path.

A `ComposedJob` holds the job's config as plain dicts that share unchanged subtrees with other jobs of the
sweep, so they are read-only. Everything else is built on first use: the interpolations resolved (not at
validation: an `${oc.env:...}` may only resolve where the job runs), the DictConfig a task function receives,
and the job's `hydra` node.

One `SweepComposer` serves rlexp's sweeper (batch validation) and the GKE launcher: `compose` remembers every
job, so the launcher gets what the validation already composed.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

_SIMPLE_SUBDIRS = ("${hydra.job.num}", "${hydra.job.id}")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")  # a plain dotted key: no +/~ prefix, no @package
_U = r"(?:0|[1-9][0-9]*)"  # Hydra's INT_UNSIGNED, without `_` separators
_INT = re.compile(rf"[+-]?{_U}\Z")
_POINT = rf"(?:{_U}\.|{_U}?\.[0-9]+)"
_FLOAT = re.compile(rf"[+-]?(?:{_POINT}|(?:{_U}|{_POINT})[eE][+-]?[0-9]+)\Z")
_MISSING = object()


class ComposedJob:
    """One job of a sweep as composed by Hydra (or as Hydra would compose it).

    `raw` is the task config without the `hydra` node as a plain dict, interpolations kept (.hydra/config.yaml);
    `resolved` the same with interpolations resolved; `task` the DictConfig; `hydra` is {"hydra": {...}}: the full
    Hydra node, or the job fields of a shared composition. Dicts may share subtrees with other jobs: read-only.
    """

    def __init__(
        self,
        out_dir: Path,
        raw: dict,
        *,
        task: Callable[[], DictConfig],
        hydra: Callable[[], DictConfig],
        resolved: Callable[[], dict],
        name: str,
    ) -> None:
        self.out_dir = out_dir
        self.raw = raw
        self.name = name  # hydra.job.name
        self._make = {"task": task, "hydra": hydra, "resolved": resolved}
        self._built: dict[str, Any] = {}

    def _get(self, what: str) -> Any:
        if what not in self._built:
            self._built[what] = self._make[what]()
        return self._built[what]

    @property
    def task(self) -> DictConfig:
        """The job's config without the `hydra` node, as the task function would receive it."""
        return self._get("task")  # type: ignore[no-any-return]

    @property
    def hydra(self) -> DictConfig:
        return self._get("hydra")  # type: ignore[no-any-return]

    @property
    def resolved(self) -> dict:
        """`raw` with interpolations resolved; resolver errors surface here, not when composing."""
        return self._get("resolved")  # type: ignore[no-any-return]


class _Base:
    """One full Hydra composition, shared by every job with the same structural overrides."""

    def __init__(self, full: DictConfig, master: DictConfig) -> None:
        self.full = full
        task = copy.deepcopy(full)
        with open_dict(task):
            task.pop("hydra")
        OmegaConf.copy_cache(from_config=master, to_config=task)  # ${now:...} as the master resolved it
        self.task = task
        raw_sweep = OmegaConf.to_container(full.hydra.sweep, resolve=False)
        assert isinstance(raw_sweep, dict)
        self.raw_sweep_dir = str(raw_sweep["dir"])  # e.g. multirun/${run_name}/${now:...}
        simple = raw_sweep["subdir"] in _SIMPLE_SUBDIRS
        self.sweep_dir = str(full.hydra.sweep.dir) if simple else None  # None: every job takes the full path
        self.raw: dict = OmegaConf.to_container(task, resolve=False)  # type: ignore[assignment]
        self.interpolated = dict(_interpolated(self.raw))  # dotted path -> raw text of every interpolated leaf
        self.name = str(full.hydra.job.name)
        od = full.hydra.job.config.override_dirname
        self.dirname_args = {"kv_sep": od.kv_sep, "item_sep": od.item_sep, "exclude_keys": list(od.exclude_keys)}
        self.dependents: dict[tuple[str, ...], list[str] | None] = {}
        self._resolved: dict | None = None

    def resolved(self) -> dict:
        if self._resolved is None:
            self._resolved = OmegaConf.to_container(self.task, resolve=True)  # type: ignore[assignment]
        return self._resolved  # type: ignore[return-value]

    def dependents_of(self, keys: tuple[str, ...]) -> list[str] | None:
        """The interpolated leaves whose value may change when `keys` change (transitively), or None when the
        sweep dir may change (the job is then composed in full). A name test on the raw text: it may re-resolve
        a leaf that did not change, never miss one that mentions a changed key."""
        if keys not in self.dependents:
            dirty = {k.rpartition(".")[2] for k in keys}
            pending = dict(self.interpolated)
            found: list[str] = []
            changed = True
            while changed:
                changed = False
                for path, text in list(pending.items()):
                    if any(name in text for name in dirty):
                        found.append(path)
                        dirty.add(path.rpartition(".")[2])
                        del pending[path]
                        changed = True
            moves = any(name in self.raw_sweep_dir for name in dirty)
            self.dependents[keys] = None if moves else found
        return self.dependents[keys]


class SweepComposer:
    """Compose a sweep's jobs; `compose(overrides, idx)` gives what Hydra's per-job composition gives."""

    def __init__(self, config_loader: Any, master: DictConfig) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.loader = config_loader
        self.master = master
        self.parser = OverridesParser.create()
        self.bases: dict[tuple[str, ...], _Base] = {}
        self.full_compositions = 0
        self._parsed: dict[str, Any] = {}
        self._numbers: dict[tuple[str, type], Any] = {}  # (key, int or float) -> a parsed `key=<number>`
        self._groups: dict[str, bool] = {}
        self._jobs: dict[tuple[tuple[str, ...], int], ComposedJob] = {}

    def compose(self, overrides: Sequence[str], idx: int) -> ComposedJob:
        """The job's composition (remembered: the launcher gets what the sweeper's validation composed).

        Raises Hydra's own exceptions for a bad override (unknown key or option, wrong type)."""
        key = (tuple(overrides), idx)
        job = self._jobs.get(key)
        if job is None:
            job = self._jobs[key] = self._compose(list(overrides), idx)
        return job

    def _is_group(self, key: str) -> bool:
        if key not in self._groups:
            repo = getattr(self.loader, "repository", None)
            self._groups[key] = repo is None or repo.group_exists(key)
        return self._groups[key]

    def _parse(self, overrides: list[str]) -> list[Any]:
        # each line parses on its own (as OverridesParser.parse_overrides does); most lines repeat across jobs
        out = []
        for line in overrides:
            if line not in self._parsed:
                self._parsed[line] = self._number(line) or self.parser.parse_overrides([line])[0]
            out.append(self._parsed[line])
        return out

    def _number(self, line: str) -> Any:
        """`key=<number>` where `key=` with a number of the same kind parsed before (`seed=17` after `seed=0`):
        the same Override with this value, without the grammar (~0.5 ms a line). Only the spellings Hydra's
        lexer reads as one INT or FLOAT token, converted as its visitor does (int(text) / float(text))."""
        key, eq, text = line.partition("=")
        kind = int if _INT.match(text) else float if _FLOAT.match(text) else None
        template = self._numbers.get((key, kind)) if eq and kind else None
        if template is None:
            if kind is not None and _KEY.fullmatch(key):
                parsed = self.parser.parse_overrides([line])[0]
                if type(parsed.value()) is kind and parsed.key_or_group == key and parsed.package is None:
                    self._numbers[(key, kind)] = parsed
                return parsed
            return None
        return dataclasses.replace(template, _value=kind(text), input_line=line)

    def _full(self, overrides: Sequence[str], idx: int) -> ComposedJob:
        """Hydra's own per-job composition (BasicLauncher's path)."""
        self.full_compositions += 1
        cfg = self.loader.load_sweep_config(self.master, list(overrides))
        hc = cfg.hydra
        with read_write(hc), open_dict(hc):
            hc.job.id = idx
            hc.job.num = idx
            out_dir = Path(str(hc.sweep.dir)) / str(hc.sweep.subdir)
            hc.runtime.output_dir = str(out_dir.absolute())
        hydra_cfg = OmegaConf.create({"hydra": hc})
        with open_dict(cfg):
            cfg.pop("hydra")
        raw: dict = OmegaConf.to_container(cfg, resolve=False)  # type: ignore[assignment]
        return ComposedJob(
            out_dir,
            raw,
            task=lambda: cfg,
            hydra=lambda: hydra_cfg,
            resolved=lambda: OmegaConf.to_container(cfg, resolve=True),  # type: ignore[arg-type,return-value]
            name=str(hc.job.name),
        )

    def _base(self, structural: tuple[str, ...]) -> _Base:
        if structural not in self.bases:
            self.full_compositions += 1
            self.bases[structural] = _Base(self.loader.load_sweep_config(self.master, list(structural)), self.master)
        return self.bases[structural]

    def _compose(self, overrides: list[str], idx: int) -> ComposedJob:
        from hydra.core.override_parser.types import OverrideType

        parsed = self._parse(overrides)
        structural, values = [], []
        for o in parsed:
            simple = o.type == OverrideType.CHANGE and not o.is_sweep_override() and o.package is None
            simple = simple and not o.is_hydra_override() and not self._is_group(o.key_or_group.replace(".", "/"))
            if simple:  # a scalar; an interpolation (kept as text in .hydra/config.yaml) or ??? takes Hydra's path
                value = o.value()
                simple = not isinstance(value, dict | list) and not (isinstance(value, str) and "${" in value)
                simple = simple and value != "???"
            (values if simple else structural).append(o if simple else o.input_line)
        base = self._base(tuple(structural))
        if base.sweep_dir is None:
            return self._full(overrides, idx)
        for o in values:  # only existing leaves are safe to set after composition
            if not _is_leaf(base.raw, o.key_or_group):
                return self._full(overrides, idx)
        keys = tuple(o.key_or_group for o in values)
        deps = base.dependents_of(keys)
        if deps is None:
            return self._full(overrides, idx)
        new = _set_on(base, values, read=keys)  # Hydra's type checks and conversions; raises as Hydra does
        if new is None:  # an override turned a leaf into a config node: let Hydra compose it
            return self._full(overrides, idx)
        raw = base.raw
        for k, v in zip(keys, new, strict=True):
            raw = _replace(raw, k, v)
        out_dir = Path(base.sweep_dir) / str(idx)
        task_overrides = [o for o in parsed if not o.is_hydra_override()]

        def task() -> DictConfig:
            cfg = copy.deepcopy(base.task)
            OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
            from rlexp.compat.hydra import apply_value_overrides

            apply_value_overrides(values, cfg)
            return cfg

        def hydra() -> DictConfig:
            from rlexp.compat.hydra import overrides_dirname

            job = {
                "name": base.name,
                "id": idx,
                "num": idx,
                "override_dirname": overrides_dirname(task_overrides, **base.dirname_args),
            }
            return OmegaConf.create(
                {
                    "hydra": {
                        "job": job,
                        "runtime": {"output_dir": str(out_dir.absolute())},
                        "overrides": {"task": [o.input_line for o in task_overrides]},
                    }
                }
            )

        def resolved() -> dict:
            try:
                out = base.resolved()
            except Exception:  # the shared composition does not resolve on its own: resolve this job's config
                return OmegaConf.to_container(task(), resolve=True)  # type: ignore[return-value]
            for k, v in zip(keys, new, strict=True):
                out = _replace(out, k, v)
            if deps:  # interpolations that mention a changed key (transitively), resolved with the job's values set
                for path, v in zip(deps, _set_on(base, values, read=tuple(deps), resolve=True) or [], strict=True):
                    out = _replace(out, path, v)
            return out

        return ComposedJob(out_dir, raw, task=task, hydra=hydra, resolved=resolved, name=base.name)


def _set_on(base: _Base, values: Sequence[Any], *, read: tuple[str, ...], resolve: bool = False) -> list | None:
    """Apply parsed leaf overrides to the shared composition as Hydra does, read the leaves `read` back, and
    set the overridden leaves back to their stored values (interpolation text and `???` included).

    Returns the values read, or None when one of them is a config node (read without resolving: the keys set);
    with `resolve`, interpolated leaves are resolved (a config node as a plain container)."""
    from rlexp.compat.hydra import apply_value_overrides

    cfg = base.task
    old = [_leaf(base.raw, o.key_or_group) for o in values]
    done = 0
    try:
        for o in values:
            apply_value_overrides([o], cfg)
            done += 1
        out = []
        for key in read:
            v = OmegaConf.select(cfg, key)
            if OmegaConf.is_config(v):
                if not resolve:
                    return None
                v = OmegaConf.to_container(v, resolve=True)
            out.append(v)
        return out
    finally:
        for o, v in reversed(list(zip(values[:done], old[:done], strict=True))):
            OmegaConf.update(cfg, o.key_or_group, v, merge=False)


def _leaf(raw: Any, key: str) -> Any:
    """The value at dotted `key` of a plain tree, or _MISSING."""
    node = raw
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _is_leaf(raw: dict, key: str) -> bool:
    node = _leaf(raw, key)
    return node is not _MISSING and not isinstance(node, dict | list)


def _replace(tree: Any, path: str, value: Any) -> Any:
    """`tree` with the leaf at dotted `path` set to `value`: new dicts/lists along the path, the rest shared."""
    head, _, rest = path.partition(".")
    if isinstance(tree, list):
        out_list = list(tree)
        i = int(head)
        out_list[i] = _replace(tree[i], rest, value) if rest else value
        return out_list
    out = dict(tree)
    out[head] = _replace(tree[head], rest, value) if rest else value
    return out


def _interpolated(node: Any, prefix: str = "") -> Any:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _interpolated(v, f"{prefix}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _interpolated(v, f"{prefix}{i}.")
    elif isinstance(node, str) and "${" in node:
        yield prefix[:-1], node
