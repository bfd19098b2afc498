"""Dataset loaders keyed by `dataset.loader`, and the split type they return.

A loader gets the DatasetConfig and returns `Splits` of raw rows whose `question` is the
task text; `prompt` is filled in later by the chat template (rlexp.data.templates), so the
same data can be rendered for any model. Unparseable rows are counted, never trained on.
"""

from __future__ import annotations

import contextvars
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlexp.config.schema import DatasetConfig
from rlexp.errors import ConfigError

Row = dict[str, Any]  # {id, question, answer, data_source} (+ prompt after rendering)


@dataclass
class Splits:
    """Rows of both splits, capped to `dataset.train_size`/`eval_size`, in draw order.

    `spare_train`/`spare_eval` hold the rows past the caps, in the same order: when the
    prompt-length filter (rlexp.data.templates.render_splits) drops capped rows, the next spare
    rows take their place, so the caps count rows that survive the filter (filter first, then
    cap, as the seeds do).
    """

    train: list[Row]
    eval: list[Row]
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count of rows not used
    spare_train: list[Row] = field(default_factory=list, repr=False)
    spare_eval: list[Row] = field(default_factory=list, repr=False)


Loader = Callable[[DatasetConfig], Splits]
_LOADERS: dict[str, Loader] = {}
_BUILTIN_MODULES = ("rlexp.data.arith", "rlexp.data.files")
_ALLOW_DOWNLOADS: contextvars.ContextVar[bool] = contextvars.ContextVar("allow_downloads", default=True)


def register(name: str) -> Callable[[Loader], Loader]:
    def deco(fn: Loader) -> Loader:
        _LOADERS[name] = fn
        return fn

    return deco


def known_loaders() -> set[str]:
    for m in _BUILTIN_MODULES:
        importlib.import_module(m)
    return set(_LOADERS)


def allow_downloads() -> bool:
    """Whether the running `load_splits` call may fetch hub datasets (False: cache only)."""
    return _ALLOW_DOWNLOADS.get()


def load_splits(cfg: DatasetConfig, *, allow_downloads: bool = True) -> Splits:
    """Train and eval rows of the configured dataset; `skipped` counts the rows that could not be used."""
    if cfg.loader not in known_loaders():
        raise ConfigError("dataset.loader", cfg.loader, f"use one of {', '.join(sorted(_LOADERS))}")
    token = _ALLOW_DOWNLOADS.set(allow_downloads)
    try:
        return _LOADERS[cfg.loader](cfg)
    finally:
        _ALLOW_DOWNLOADS.reset(token)
