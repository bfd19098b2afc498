"""`code` and `code_tests`: rewards computed by running code in the sandbox (`rlexp.rewards.sandbox`).

`code` runs a user snippet (inline `snippet`, or `file`) that defines `evaluate(example, response) -> float`,
the shape of Vertex's code-execution scorer: `example` holds the row's fields (`prompt`, `answer`, `id`,
`data_source`), `response` is {"text": <completion>}. The snippet is parsed when the config is checked; one
that does not parse or defines no `evaluate` is refused before training. `clip: [lo, hi]` bounds its values.

`code_tests` grades code completions with unit tests: the completion's last fenced block (```python ... ```,
or the whole completion when it has none) runs, then each test (a Python statement, usually an assert) of
the row; the reward is the share of tests passed. The tests come from the batch field `tests_field` when the
data provides it, else from `answer` (with `dataset=jsonl dataset.answer_field=tests` the row's list arrives
as its text): a JSON or Python list of strings, or one test per line.

Both send the whole batch as ONE job to a warm sandbox worker kept for the run (started when the reward is
built, so bubblewrap and its interpreter start while the model loads); each call runs in a fresh forked child
of it, so nothing of one call reaches the next. Each item gets `item_timeout_s`: code that loops, crashes or
hits a limit costs only its item (for `code_tests` the tests it did not pass count as failed; for `code` the
item is NaN, an errored value). `code_tests` runs each completion in a child of its own; `code` scores a call's
items in a few children of the call (the snippet's module code runs once per call), a fresh one taking over
after an item that failed. A call that fails as a whole (the snippet's module code hangs past `timeout_s`,
the sandbox dies) is retried once, then scores NaN for all its items. `sandbox: none` (the explicit opt-out where bubblewrap is missing) runs the same job in a
plain child process: limits, timeout and clean environment, but no file or network isolation.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Any

from rlexp.errors import ConfigError
from rlexp.rewards.http_reward import json_value
from rlexp.rewards.registry import RewardFn, register
from rlexp.rewards.sandbox import Limits, Sandbox, SandboxError, require_bwrap

_K = "reward.functions[].kwargs"
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_OPEN_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n", re.IGNORECASE)


def extract_code(completion: str) -> str:
    """The last ```python fenced block (an unclosed last fence runs to the end); the whole text without one."""
    blocks = _FENCE.findall(completion)
    if blocks:
        return blocks[-1]
    opened = list(_OPEN_FENCE.finditer(completion))
    return completion[opened[-1].end() :] if opened else completion


def parse_tests(value: Any) -> list[str]:
    """A row's tests as a list of statements: a list, a JSON or Python list literal, or one per line."""
    value = json_value(value)
    if isinstance(value, str):
        text = value.strip()
        for parse in (json.loads, ast.literal_eval):
            try:
                value = parse(text)
                break
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
        else:
            value = [line for line in text.splitlines() if line.strip()]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [str(t) for t in value if str(t).strip()]


def _sandbox(mode: str, key: str, **limits: Any) -> Sandbox:
    if mode not in ("bwrap", "none"):
        raise ConfigError(f"{key}.sandbox", mode, "use bwrap, or none to run without file and network isolation")
    lim = Limits(**{k: v for k, v in limits.items() if v is not None or k in ("memory_mb", "nproc")})
    lim.check(key)
    if mode == "bwrap":
        require_bwrap(f"{key}.sandbox", mode, f"{key}.sandbox=none")
    return Sandbox("bwrap" if mode == "bwrap" else "process", lim)


def _attach(fn: Any, box: Sandbox) -> RewardFn:
    """The reward's counters, its `close` (RewardSet.close stops the warm workers) and its sandbox; warms one."""
    fn.last_error = None
    fn.counters = box.calls
    fn.close = box.close
    fn.sandbox = box
    box.warm()
    return fn


def _snippet_source(snippet: str | None, file: str | None) -> tuple[str, str]:
    if (snippet is None) == (file is None):
        raise ConfigError(f"{_K}.snippet", snippet, "give exactly one of snippet (inline code) or file (a .py path)")
    if file is not None:
        path = Path(file).expanduser()
        if not path.is_file():
            raise ConfigError(f"{_K}.file", file, "no such file; give the path of a .py file defining evaluate")
        return path.read_text(), str(path)
    return snippet, "<snippet>"  # type: ignore[return-value]


def check_snippet(source: str, where: str, key: str) -> None:
    """Refuse a snippet that does not parse or binds no top-level `evaluate` (one line, before training)."""
    try:
        tree = ast.parse(source, where)
    except SyntaxError as err:
        raise ConfigError(key, where, f"does not parse: {err.msg} (line {err.lineno}); fix the snippet") from None
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.ImportFrom | ast.Import):
            targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
            names.update((a.asname or a.name) for a in getattr(node, "names", []))
    if "evaluate" not in names:
        raise ConfigError(key, where, "defines no evaluate(example, response) -> float; define it at top level")


def _rows(n: int, prompts: Any, fields: dict[str, Any]) -> list[dict[str, Any]]:
    cols: dict[str, list[Any]] = {"prompt": _col(prompts, n)}
    for k, v in fields.items():
        col = _col(v, n)
        if col is not None:
            cols[k] = col
    return [{k: c[i] for k, c in cols.items() if c is not None} for i in range(n)]


def _col(value: Any, n: int) -> list[Any] | None:
    value = json_value(value)
    if isinstance(value, list) and len(value) == n:
        return value
    return None  # a scalar or a field of another length is not a per-completion column


def _values(fn: Any, sandbox: Sandbox, job: dict[str, Any], n: int, clip: list[float] | None) -> list[float]:
    try:
        answer = sandbox.run(job)
    except SandboxError as err:
        fn.last_error = str(err)
        return [math.nan] * n
    values = [math.nan if v is None else float(v) for v in answer["values"]]
    if len(values) != n:
        fn.last_error = f"the sandbox returned {len(values)} values for {n} completions"
        return [math.nan] * n
    errors = [e for e in answer.get("errors") or [] if e]
    if errors:
        fn.last_error = errors[-1]
    if clip:
        lo, hi = clip
        values = [v if math.isnan(v) else max(lo, min(hi, v)) for v in values]
    return values


_LIMITS = ("timeout_s", "item_timeout_s", "cpu_s", "memory_mb", "nproc")


def _check_limits(kwargs: dict[str, Any]) -> None:
    """The sandbox's limits given in kwargs, checked with the config (a negative memory_mb), not at the build."""
    _sandbox(kwargs.get("sandbox", "bwrap"), _K, **{k: kwargs[k] for k in _LIMITS if k in kwargs})


def _check_code(snippet: str | None = None, file: str | None = None, **kwargs: Any) -> None:
    source, where = _snippet_source(snippet, file)
    check_snippet(source, where, f"{_K}.{'file' if file else 'snippet'}")
    _check_limits(kwargs)


@register("code", check=lambda key, kwargs: _check_code(**kwargs))
def code_reward(
    snippet: str | None = None,
    file: str | None = None,
    sandbox: str = "bwrap",
    timeout_s: float = 100.0,
    item_timeout_s: float = 10.0,
    cpu_s: float | None = None,
    memory_mb: int | None = 1024,
    nproc: int | None = 64,
    clip: list[float] | None = None,
) -> RewardFn:
    """evaluate(example, response) of the user's snippet, one sandbox call per batch."""
    source, where = _snippet_source(snippet, file)
    check_snippet(source, where, f"{_K}.{'file' if file else 'snippet'}")
    if clip is not None and (len(clip) != 2 or clip[0] > clip[1]):
        raise ConfigError(f"{_K}.clip", clip, "give [low, high] with low <= high, or null")
    box = _sandbox(
        sandbox, _K, timeout_s=timeout_s, item_timeout_s=item_timeout_s, cpu_s=cpu_s, memory_mb=memory_mb, nproc=nproc
    )

    def code(prompts: Any, completions: Any, **fields: Any) -> list[float]:
        texts = [str(c) for c in json_value(completions)]
        rows = _rows(len(texts), prompts, fields)
        items = [{"example": r, "response": {"text": t}} for r, t in zip(rows, texts, strict=True)]
        job = {"kind": "evaluate", "source": source, "filename": where, "items": items}
        return _values(code, box, job, len(texts), list(clip) if clip else None)

    return _attach(code, box)


@register("code_tests", check=lambda key, kwargs: _check_limits(kwargs))
def code_tests_reward(
    tests_field: str = "tests",
    sandbox: str = "bwrap",
    timeout_s: float = 100.0,
    item_timeout_s: float = 10.0,
    cpu_s: float | None = None,
    memory_mb: int | None = 1024,
    nproc: int | None = 64,
) -> RewardFn:
    """Share of the row's tests that the completion's code passes, one sandbox call per batch."""
    box = _sandbox(
        sandbox, _K, timeout_s=timeout_s, item_timeout_s=item_timeout_s, cpu_s=cpu_s, memory_mb=memory_mb, nproc=nproc
    )

    def code_tests(prompts: Any, completions: Any, **fields: Any) -> list[float]:
        texts = [str(c) for c in json_value(completions)]
        n = len(texts)
        source = fields.get(tests_field) if fields.get(tests_field) is not None else fields.get("answer")
        tests = _col(source, n) or [source] * n
        items = [{"code": extract_code(t), "tests": parse_tests(ts)} for t, ts in zip(texts, tests, strict=True)]
        values = [math.nan] * n
        todo = [i for i, it in enumerate(items) if it["tests"]]
        if len(todo) < n:
            code_tests.last_error = f"no tests in field {tests_field!r} or answer for {n - len(todo)} item(s)"
        if todo:
            job = {"kind": "tests", "items": [items[i] for i in todo]}
            for i, v in zip(todo, _values(code_tests, box, job, len(todo), None), strict=True):
                values[i] = v
        return values

    return _attach(code_tests, box)
