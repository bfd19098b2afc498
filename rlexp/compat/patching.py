"""Replacing a pinned library's function, guarded: the one mechanism behind `rlexp.fixes` and `rlexp.perf`.

A patch names the library attributes it replaces (`Target`: owner object, attribute, and the fingerprint of the
library source it was written against) and wraps each one (`layer`: original -> replacement). `install` checks
every fingerprint first, then sets each attribute to its original wrapped by every layer installed on it, in a
fixed order; `uninstall` removes a patch's layers and puts back what remains. So the state of a library is a
function of which patches are installed, whatever order calls came in, and removing all of them gives back the
library's own objects (identity, not a copy).

The fingerprint is a SHA-256 of the replaced function's source (`inspect.getsource`, dedented). A library
upgrade that changes a replaced function fails the run in one line naming the patch, the function and the key
that turns the patch off (`PatchGuardError`), before anything runs on the changed code.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlexp.errors import RunError

# What a user does when a correctness fix's guard fires: there is no running without it.
REINSTALL = "rlexp is written against the pins in its pyproject.toml: pip install google-tunix==0.1.7"

PERF_KEY = "perf.patches"  # the config key that selects rlexp.perf's patches

Layer = Callable[[Callable[..., Any]], Callable[..., Any]]


class PatchGuardError(RunError):
    """A replaced library function is not the source its patch was written against (exit status 1)."""


@dataclass(frozen=True)
class Target:
    """One library attribute a patch replaces: `owner.attr`, a function or method written as `fingerprint`."""

    owner: Any  # a module or a class
    attr: str
    fingerprint: str
    distribution: str = "google-tunix"  # the package whose version the message names

    @property
    def name(self) -> str:
        owner = getattr(self.owner, "__qualname__", None)
        module = getattr(self.owner, "__module__", None) if owner else self.owner.__name__
        return f"{module}.{owner}.{self.attr}" if owner else f"{module}.{self.attr}"


def fingerprint(fn: Callable[..., Any]) -> str:
    """The first 16 hex digits of the SHA-256 of `fn`'s source; 'no source' where Python has none (a function
    defined by `exec`, a C function), which matches no recorded fingerprint."""
    try:
        source = textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))
    except (OSError, TypeError):
        return "no source"
    return hashlib.sha256(source.encode()).hexdigest()[:16]


# (id(owner), attr) -> the library's own object, and the layers installed on it: patch name -> (rank, layer)
_originals: dict[tuple[int, str], tuple[Any, Any]] = {}
_layers: dict[tuple[int, str], dict[str, tuple[int, Layer]]] = {}


def original(owner: Any, attr: str) -> Any:
    """The library's own `owner.attr`, whether or not patches are installed on it."""
    key = (id(owner), attr)
    return _originals[key][1] if key in _originals else owner.__dict__[attr]


def check(patch: str, targets: list[Target], off: str, key: str = "fixes") -> None:
    """Raise PatchGuardError unless every target's original source has its recorded fingerprint; `off`: how the
    user runs without the patch (a key=value, or what to reinstall); `key`: what selects the patch
    (`perf.patches` for rlexp.perf; the fixes are always on), which the message starts with."""
    for t in targets:
        found = fingerprint(original(t.owner, t.attr))
        if found != t.fingerprint:
            try:
                version = importlib.metadata.version(t.distribution)
            except importlib.metadata.PackageNotFoundError:
                version = "not installed"
            raise PatchGuardError(
                f"{key}={patch}: {t.name} is not the code the patch was written against ({t.distribution} {version}: "
                f"source fingerprint {found}, expected {t.fingerprint}); {off}"
            )


def install(patch: str, layers: list[tuple[Target, int, Layer]], off: str, key: str = "fixes") -> None:
    """Check the targets' fingerprints, then install `patch`'s layers (target, rank, wrapper): on each attribute,
    lower ranks wrap first (sit closer to the library's function). Installing a patch again changes nothing."""
    check(patch, [t for t, _, _ in layers], off, key)
    for t, rank, layer in layers:
        key = (id(t.owner), t.attr)
        if key not in _originals:
            _originals[key] = (t.owner, t.owner.__dict__[t.attr])
        _layers.setdefault(key, {})[patch] = (rank, layer)
        _rebuild(key)


def uninstall(patch: str) -> None:
    """Remove `patch`'s layers wherever they are installed; the attributes keep the other patches' layers."""
    for key, by_patch in list(_layers.items()):
        if by_patch.pop(patch, None) is not None:
            _rebuild(key)


def installed() -> set[str]:
    """The names of the patches installed now."""
    return {name for by_patch in _layers.values() for name in by_patch}


def _rebuild(key: tuple[int, str]) -> None:
    owner, fn = _originals[key]
    lib_fn = fn
    for _, name, layer in sorted((rank, name, layer) for name, (rank, layer) in _layers.get(key, {}).items()):
        inner, fn = fn, layer(fn)
        fn.rlexp_patch = name  # what a debugger shows is rlexp's; inspect.unwrap reaches the library's function
        if not hasattr(fn, "__wrapped__"):
            fn.__wrapped__ = inner
    setattr(owner, key[1], fn)
    if fn is lib_fn:
        _layers.pop(key, None)
        _originals.pop(key, None)
