"""`python`: a user reward function named as `module:function` or `path/to/file.py:function`.

`call: batch` (default) calls it with Tunix's signature, `fn(prompts, completions, **fields)
-> list[float]`, fields (answer, id, ...) one per completion. `call: item` calls it once per
completion as `fn(prompt=..., completion=..., answer=..., **fields) -> float`, the shape of
Vertex's `evaluate(example, response)`. `kwargs` are passed on every call. Exceptions and
NaN are counted by the reward set as errored invocations (per item with `call: item`);
they never crash a step.

`isolation` says where the function runs:
  process     (default) a child process per call with the user's environment, working directory and
              modules (a function imports them), under the wall `timeout_s` and `memory_mb`; a crash or
              a hang costs that call (retried once, then NaN), never the trainer. Fields arrive as plain
              lists (JSON), not numpy arrays
  sandbox     under bubblewrap like reward=code (no network, read-only root, clean environment, $HOME and
              the working tree hidden): needs `path/to/file.py:function`, whose imports are the standard
              library's; refused in one line where bubblewrap does not work
  in_process  the explicit opt-in to call it inside the trainer (no timeout; numpy fields; fastest)
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
from rlexp.rewards.sandbox import Limits, Sandbox, SandboxError, require_bwrap

_KEY = "reward.functions[].kwargs.function"
_ISO = "reward.functions[].kwargs.isolation"


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
    except SyntaxError as err:
        raise ConfigError(_KEY, spec, f"SyntaxError: {err.msg} (line {err.lineno}); fix the file") from None
    except Exception as err:  # noqa: BLE001 - the module's own code raised while it was imported
        raise ConfigError(_KEY, spec, f"importing it raised {type(err).__name__}: {err}; fix the file") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(_KEY, spec, f"{target} defines no function {name}")
    return fn


def _check(
    function: Any = "",
    call: str = "batch",
    isolation: str = "process",
    kwargs: Any = None,
    timeout_s: Any = 100.0,
    memory_mb: Any = None,
    **_: Any,
) -> None:
    if not isinstance(function, str) or not function:
        raise ConfigError(_KEY, function, "use module:function or path/to/file.py:function")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ConfigError("reward.functions[].kwargs.kwargs", kwargs, "use a mapping of keyword arguments, e.g. {k: v}")
    Limits(timeout_s=timeout_s, memory_mb=memory_mb, nproc=None, fsize_mb=None).check("reward.functions[].kwargs")
    if call not in ("batch", "item"):
        raise ConfigError("reward.functions[].kwargs.call", call, "use batch or item")
    if isolation not in ("process", "sandbox", "in_process"):
        raise ConfigError(_ISO, isolation, "use process, sandbox (bubblewrap) or in_process")
    target = function.rpartition(":")[0]
    if target.endswith(".py") and Path(target).expanduser().is_file():  # compiled, not run: before anything heavy
        try:
            compile(Path(target).expanduser().read_bytes(), target, "exec")
        except SyntaxError as err:
            raise ConfigError(_KEY, function, f"SyntaxError: {err.msg} (line {err.lineno}); fix the file") from None
    if isolation == "sandbox":
        if not target.endswith(".py"):
            raise ConfigError(_KEY, function, f"{_ISO}=sandbox needs path/to/file.py:function; or use process")
        require_bwrap(_ISO, isolation, f"{_ISO}=process (or in_process)")


@register("python", check=lambda key, kwargs: _check(**kwargs))
def python_reward(
    function: str,
    call: str = "batch",
    kwargs: dict[str, Any] | None = None,
    isolation: str = "process",
    timeout_s: float = 100.0,
    memory_mb: int | None = None,
) -> RewardFn:
    """The user's reward function, called per batch or per item, in a child process by default."""
    _check(function, call, isolation)
    if isolation != "in_process":
        return _isolated(function, call, dict(kwargs or {}), isolation, timeout_s, memory_mb)
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


def _isolated(
    function: str, call: str, extra: dict[str, Any], isolation: str, timeout_s: float, memory_mb: int | None
) -> RewardFn:
    """The function run by `rlexp.rewards.sandbox_worker` in a child process (or bubblewrap) per call."""
    from rlexp.rewards.http_reward import json_value

    if isolation == "sandbox":
        target, _, name = function.rpartition(":")
        path = Path(target).expanduser()
        if not path.is_file():
            raise ConfigError(_KEY, function, f"no such file {path.resolve()}")
        base: dict[str, Any] = {"source": path.read_text(), "filename": str(path), "function": name}
        box = Sandbox("bwrap", Limits(timeout_s=timeout_s, memory_mb=memory_mb or 1024))
    else:
        base = {"spec": function, "function": function.rpartition(":")[2]}
        box = Sandbox("user", Limits(timeout_s=timeout_s, memory_mb=memory_mb, nproc=None, fsize_mb=None))
    base.update(kind="python", call=call, kwargs=json_value(extra))
    try:
        box.run({**base, "check_only": True})  # imports it once: a missing module or function is a usage error
    except SandboxError as err:
        raise ConfigError(_KEY, function, str(err).split(": ", 1)[1]) from None

    def isolated(prompts: Any, completions: Any, **fields: Any) -> list[float]:
        n = len(completions)
        cols = {k: json_value(v) for k, v in fields.items()}
        if call == "batch":
            job = {
                **base,
                "batch": {"prompts": json_value(prompts), "completions": json_value(completions), "fields": cols},
            }
        else:
            rows = [{k: v[i] for k, v in cols.items() if _is_column(v, n)} for i in range(n)]
            items = [
                {"prompt": p, "completion": c, **r}
                for p, c, r in zip(json_value(prompts), json_value(completions), rows, strict=True)
            ]
            job = {**base, "items": items}
        try:
            answer = box.run(job)
        except SandboxError as err:
            isolated.last_error = str(err)  # type: ignore[attr-defined]
            return [math.nan] * n
        errors = [e for e in answer.get("errors") or [] if e]
        if errors:
            isolated.last_error = errors[-1]  # type: ignore[attr-defined]
        return [math.nan if v is None else v for v in answer["values"]]

    isolated.last_error = None  # type: ignore[attr-defined]
    isolated.counters = box.calls  # type: ignore[attr-defined]
    isolated.close = box.close  # type: ignore[attr-defined]  # RewardSet.close stops its warm workers
    return isolated
