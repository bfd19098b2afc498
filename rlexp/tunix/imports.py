"""Tunix's package `__init__` imports every trainer Tunix has (agentic GRPO and through it pandas, distillation,
DPO, PPO): ~1 s of every rlexp process, for modules a GRPO run never touches. rlexp imports the submodules it uses
by their full names, so `defer_package_init` lets those run without it. Imports nothing of Tunix: `rlexp`'s own
`__init__` calls it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any


def defer_package_init() -> None:
    """Have the next `import tunix` skip the package's `__init__` until a top-level name is asked for.

    Submodule imports (`from tunix.rl import rl_cluster`) need only the package's path. The first lookup of a
    name the package itself defines (`tunix.GRPOLearner`, `from tunix import Sampler`) runs the real `__init__`
    into the same module, so code that uses the top-level API sees what it always saw. Nothing is imported or
    looked up before something imports tunix; a no-op when tunix is already imported.
    """
    if "tunix" not in sys.modules and not any(isinstance(f, _DeferredTunixFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _DeferredTunixFinder())


class _DeferredTunixFinder(importlib.abc.MetaPathFinder):
    """Finds `tunix` once, as the real package spec with a loader that defers its `__init__`."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tunix":
            return None
        sys.meta_path.remove(self)  # once: the real finders answer everything else, and any later reload
        spec = importlib.util.find_spec("tunix")
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _DeferredInitLoader(spec.loader)
        return spec


class _DeferredInitLoader(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:  # resource readers, get_filename ...: the real loader's
        return getattr(self.real, name)

    def exec_module(self, package: ModuleType) -> None:
        def run_init_then_get(name: str) -> Any:
            if name.startswith("__") and name != "__version__":  # probes (inspect, copy) need not import it all
                raise AttributeError(f"module 'tunix' has no attribute {name!r}")
            del package.__getattr__  # the real __init__ defines the names; later misses are plain AttributeErrors
            self.real.exec_module(package)
            return getattr(package, name)

        package.__getattr__ = run_init_then_get
