"""`python`: a user reward function named as `module:function` or `path/to/file.py:function`.

`call: batch` (default) calls it with Tunix's signature, `fn(prompts, completions, **fields)
-> list[float]`, fields (answer, id, ...) one per completion. `call: item` calls it once per
completion as `fn(prompt=..., completion=..., answer=..., **fields) -> float`, the shape of
Vertex's `evaluate(example, response)`. `kwargs` are passed on every call. Exceptions and
NaN are counted by the reward set as errored invocations (per item with `call: item`);
they never crash a step.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlexp.errors import ConfigError
from rlexp.rewards.registry import RewardFn, register

_KEY = "reward.functions[].kwargs.function"


def load_function(spec: str) -> Callable[..., Any]:
    """Import `module:function` or `file.py:function`; a ConfigError says what is missing."""
    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise ConfigError(_KEY, spec, "use module:function or path/to/file.py:function")
    try:
        if target.endswith(".py"):
            path = Path(target).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(_KEY, spec, f"no such file {path}")
            module_name = f"rlexp_user_reward_{path.stem}"
            module_spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
            sys.modules[module_name] = module
            module_spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(target)
    except ImportError as err:
        raise ConfigError(_KEY, spec, f"cannot import {target}: {err}") from err
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(_KEY, spec, f"{target} defines no function {name}")
    return fn


@register("python")
def python_reward(function: str, call: str = "batch", kwargs: dict[str, Any] | None = None) -> RewardFn:
    """The user's reward function, called per batch or per item."""
    if call not in ("batch", "item"):
        raise ConfigError("reward.functions[].kwargs.call", call, "use batch or item")
    fn = load_function(function)
    extra = dict(kwargs or {})

    if call == "batch":

        def batch(prompts: list[str], completions: list[str], **fields: Any) -> list[float]:
            return list(fn(prompts, completions, **fields, **extra))

        return batch

    def per_item(prompts: list[str], completions: list[str], **fields: Any) -> list[float]:
        out = []
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            row = {k: v[i] for k, v in fields.items() if _is_column(v, len(completions))}
            try:
                out.append(fn(prompt=p, completion=c, **row, **extra))
            except Exception as err:  # noqa: BLE001 - one failing item must not void the batch
                per_item.last_error = f"{type(err).__name__}: {err}"  # type: ignore[attr-defined]
                out.append(math.nan)  # counted as an errored invocation by the reward set
        return out

    return per_item


def _is_column(value: Any, n: int) -> bool:
    return hasattr(value, "__len__") and not isinstance(value, str | bytes | dict) and len(value) == n
