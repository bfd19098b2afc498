"""Compose the jobs of a sweep quickly: jobs that differ only in leaf values share one Hydra composition.

Hydra composes every job from scratch (defaults tree, YAML loads, schema merges), ~0.1-0.3 s each. In a sweep
most jobs differ only in values such as `trainer.learning_rate=3e-6`, which Hydra applies after composing,
exactly as rlexp.compat.hydra.apply_value_overrides does here. Group choices (`model=...`), appends, deletions, keys that
are not existing leaves and sweep subdirs that depend on more than the job number take Hydra's full path,
so each job gets the config Hydra would build for it.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

_ABSENT = object()
_SIMPLE_SUBDIRS = ("${hydra.job.num}", "${hydra.job.id}")


@dataclasses.dataclass
class ComposedJob:
    task: DictConfig  # the job's config without the `hydra` node (what the task function would receive)
    hydra: DictConfig  # {"hydra": {...}}: the full Hydra node, or the job fields of a shared composition
    out_dir: Path
    raw: dict  # `task` as a plain dict, interpolations kept (.hydra/config.yaml)
    resolved: dict  # `task` as a plain dict, interpolations resolved


class SweepComposer:
    def __init__(self, config_loader: Any, master: DictConfig) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.loader = config_loader
        self.master = master
        self.parser = OverridesParser.create()
        self.bases: dict[tuple[str, ...], _Base] = {}
        self.full_compositions = 0

    def _is_group(self, key: str) -> bool:
        repo = getattr(self.loader, "repository", None)
        return repo is None or repo.group_exists(key)

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
        raw = OmegaConf.to_container(cfg, resolve=False)
        return ComposedJob(cfg, hydra_cfg, out_dir, raw, OmegaConf.to_container(cfg, resolve=True))

    def _base(self, structural: tuple[str, ...]) -> _Base:
        if structural not in self.bases:
            self.full_compositions += 1
            full = self.loader.load_sweep_config(self.master, list(structural))
            task = copy.deepcopy(full)
            with open_dict(task):
                task.pop("hydra")
            raw_sweep = OmegaConf.to_container(full.hydra.sweep, resolve=False)
            sweep_dir = str(full.hydra.sweep.dir) if raw_sweep["subdir"] in _SIMPLE_SUBDIRS else None
            raw = OmegaConf.to_container(task, resolve=False)
            resolved = OmegaConf.to_container(task, resolve=True)
            self.bases[structural] = _Base(
                task, full, sweep_dir, str(raw_sweep["dir"]), raw, resolved, dict(_interpolated(raw))
            )
        return self.bases[structural]

    def compose(self, overrides: Sequence[str], idx: int) -> ComposedJob:
        from hydra.core.override_parser.types import OverrideType

        from rlexp.compat.hydra import apply_value_overrides, overrides_dirname

        parsed = self.parser.parse_overrides(list(overrides))
        structural, values = [], []
        for o in parsed:
            simple = o.type == OverrideType.CHANGE and not o.is_sweep_override() and o.package is None
            simple = simple and "${" not in o.get_value_element_as_str()
            if simple and not o.is_hydra_override() and not self._is_group(o.key_or_group.replace(".", "/")):
                values.append(o)
            else:
                structural.append(o.input_line)
        if not values:
            return self._full(overrides, idx)
        base = self._base(tuple(structural))
        base_task, full, sweep_dir = base.task, base.full, base.sweep_dir
        if sweep_dir is None:
            return self._full(overrides, idx)
        for o in values:  # only existing leaves are safe to set after composition
            value = OmegaConf.select(base_task, o.key_or_group, default=_ABSENT, throw_on_resolution_failure=False)
            if value is _ABSENT or OmegaConf.is_config(value):
                return self._full(overrides, idx)
        task = copy.deepcopy(base_task)
        OmegaConf.copy_cache(from_config=self.master, to_config=task)
        apply_value_overrides(values, task)
        raw, resolved = copy.deepcopy(base.raw), copy.deepcopy(base.resolved)
        dirty = set()
        for o in values:
            v = OmegaConf.select(task, o.key_or_group)
            _set_path(raw, o.key_or_group, v)
            _set_path(resolved, o.key_or_group, v)
            dirty.add(o.key_or_group.rpartition(".")[2])
        # interpolations that mention a changed key (transitively) are resolved again for this job
        pending = dict(base.interpolated)
        changed = True
        while changed:
            changed = False
            for path, text in list(pending.items()):
                if any(name in text for name in dirty):
                    _set_path(resolved, path, OmegaConf.select(task, path))
                    dirty.add(path.rpartition(".")[2])
                    del pending[path]
                    changed = True
        if any(name in base.raw_sweep_dir for name in dirty):
            return self._full(overrides, idx)
        out_dir = Path(sweep_dir) / str(idx)
        od = full.hydra.job.config.override_dirname
        task_overrides = [o for o in parsed if not o.is_hydra_override()]
        job = {
            "name": str(full.hydra.job.name),
            "id": idx,
            "num": idx,
            "override_dirname": overrides_dirname(
                task_overrides, kv_sep=od.kv_sep, item_sep=od.item_sep, exclude_keys=od.exclude_keys
            ),
        }
        hydra_cfg = OmegaConf.create(
            {
                "hydra": {
                    "job": job,
                    "runtime": {"output_dir": str(out_dir.absolute())},
                    "overrides": {"task": [o.input_line for o in task_overrides]},
                }
            }
        )
        return ComposedJob(task, hydra_cfg, out_dir, raw, resolved)


@dataclasses.dataclass
class _Base:
    task: DictConfig
    full: DictConfig
    sweep_dir: str | None
    raw_sweep_dir: str  # e.g. multirun/${run_name}/${now:...}: a job changing run_name lands elsewhere
    raw: dict
    resolved: dict
    interpolated: dict[str, str]  # dotted path -> raw text of every interpolated leaf


def _interpolated(node: Any, prefix: str = "") -> typing.Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _interpolated(v, f"{prefix}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _interpolated(v, f"{prefix}{i}.")
    elif isinstance(node, str) and "${" in node:
        yield prefix[:-1], node


def _set_path(d: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for p in parents:
        d = d[int(p)] if isinstance(d, list) else d[p]
    if isinstance(d, list):
        d[int(last)] = value
    else:
        d[last] = value
