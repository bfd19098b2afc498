"""tensorboardX 2.x, imported by every run through Tunix (tunix.sft.metrics_logger -> metrax.logging).

Its `writer` module runs `import torch` at import time, only to name `torch.Tensor` in type annotations: where
torch is installed (rlexp's test and bench extras) that is ~1.1 s and a few hundred MB of every rlexp process,
for a library no run uses. `import_without_torch` lets tensorboardX's own import see no torch; its functions
that take torch tensors still import torch when one is passed (tensorboardX.x2num), so nothing is lost.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any


def import_without_torch() -> None:
    """Have the next `import tensorboardX` run with `import torch` failing, unless torch is imported already.
    Nothing is imported here; a no-op when tensorboardX is already imported."""
    if "tensorboardX" not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorboardX":
            return None
        sys.meta_path.remove(self)  # once
        spec = importlib.util.find_spec("tensorboardX")
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def exec_module(self, module: ModuleType) -> None:
        if "torch" in sys.modules:  # imported for its own sake: tensorboardX may as well use it
            self.real.exec_module(module)
            return
        sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
        try:
            self.real.exec_module(module)  # its submodules (writer, ...) import while torch is hidden
        finally:
            if sys.modules.get("torch", ...) is None:
                del sys.modules["torch"]
