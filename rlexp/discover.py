"""Spec modules found by what they declare, not by a list: adding a model family or an algorithm is one module
(and its YAML), with no registry line to edit.

A spec module of a package is one whose source declares `SPEC = register(` at its top level; it is imported on the
registry's first use. The source is read as text first, so the package's support modules (its registry, the spec
type, loaders that import JAX) are never imported for the search. Pure stdlib.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from pathlib import Path

DECLARES_SPEC = re.compile(r"^SPEC\s*=\s*register\(", re.M)


def spec_modules(package: str, first: tuple[str, ...] = ()) -> list[str]:
    """Full names of the package's modules that declare a SPEC, those named in `first` first (in its order), then
    the rest by name."""
    return list(_found(package, tuple(importlib.import_module(package).__path__), first))


@functools.cache  # a registry is asked on every step (step rates, checks): its package's files are read once
def _found(package: str, path: tuple[str, ...], first: tuple[str, ...]) -> tuple[str, ...]:
    names = [m.name for m in pkgutil.iter_modules(path) if not m.ispkg and DECLARES_SPEC.search(_source(path, m.name))]
    names.sort(key=lambda n: (first.index(n) if n in first else len(first), n))
    return tuple(f"{package}.{n}" for n in names)


def _source(path: tuple[str, ...], name: str) -> str:
    for folder in path:
        file = Path(folder) / f"{name}.py"
        if file.is_file():
            return file.read_text(encoding="utf-8")
    return ""
