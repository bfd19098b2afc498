"""The one redaction pass: every line rlexp prints or writes loses the secrets it may hold.

A secret is the value of `HF_TOKEN` (and its older name), `WANDB_API_KEY`, of every environment variable a
config names in an `*_env` key (a judge's `api_key_env`, an http tool's `token_env`, an http reward's
`auth_env`), and of any key whose name says key, token, secret or password (`api_key`, `auth_token`,
`client_secret`), given in a config file or on the command line. Each is replaced by `***`, also in its JSON
escaped form. The few choke points apply `scrub`: the one-line error (rlexp.errors), the log handlers
(rlexp.log_setup: the console and the run's main.log), the run files (rlexp.storage, the run dir's JSONL
sinks), the tracker's child process (rlexp.tracking) and the entry points' stdout and stderr (`guard_streams`).

The set grows as a process learns of secrets (`note_config`, `note_argv`); environment values are read at
each scrub, so a variable exported later still counts. Values shorter than `MIN_LEN` characters are left alone:
replacing `1` or `ab` everywhere would wreck every number and word that holds them.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
MIN_LEN = 6
# variables that always hold a credential, whatever the config says
ALWAYS_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")
# a key whose last word is one of these holds a secret (`max_tokens` does not: a count, plural; a bare `key` or
# `answer_key` names a field, and a chat template's `bos_token` is a special token, not a credential)
_SECRET_NAME = re.compile(
    r"(^|[_.\-])((api|access|secret|private|auth|bearer|client|hf|wandb|openai)_?key|token|secret|password|passwd)$",
    re.IGNORECASE,
)
_NOT_SECRET = re.compile(r"(^|_)(bos|eos|pad|unk|sep|cls|mask|stop|start|end|image|audio|tool)_token$", re.IGNORECASE)
_ENV_NAME = re.compile(r"(^|_)env$", re.IGNORECASE)

_env_names: set[str] = set(ALWAYS_ENV)
_values: set[str] = set()


def secret_name(name: str) -> bool:
    """Whether a key called `name` holds a secret itself (`api_key`, `token`), not the name of a variable."""
    return bool(_SECRET_NAME.search(str(name))) and not _NOT_SECRET.search(str(name))


def note_env(name: str) -> None:
    """The value of environment variable `name` is a secret (read at each scrub)."""
    if name:
        _env_names.add(str(name))


def note_value(value: Any) -> None:
    """`value` itself is a secret."""
    if isinstance(value, str) and len(value) >= MIN_LEN:
        _values.add(value)


def note_config(node: Any) -> None:
    """Walk a config tree (dicts, lists, dataclasses, DictConfig): `*_env` keys name variables holding secrets,
    keys named like a secret hold one. Interpolations are not resolved: a broken one must not stop the walk."""
    node = _plain(node)
    if isinstance(node, Mapping):
        for key, value in node.items():
            name = str(key)
            if isinstance(value, str) and _ENV_NAME.search(name):
                note_env(value)
            elif isinstance(value, str) and secret_name(name):
                note_value(value)
            else:
                note_config(value)
    elif isinstance(node, list | tuple):
        for value in node:
            note_config(value)


def _plain(node: Any) -> Any:
    if type(node).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf

        try:
            return OmegaConf.to_container(node, resolve=False)
        except Exception:  # noqa: BLE001 - a damaged config: nothing to learn from it
            return None
    if hasattr(node, "__dataclass_fields__"):
        return {k: getattr(node, k, None) for k in node.__dataclass_fields__}
    return node


def note_argv(argv: Iterable[str] | None = None) -> None:
    """Overrides on a command line (`a.b.api_key=sk-...`, `...kwargs.token_env=MY_TOKEN`, `--api-key sk-...`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(args):
        if arg.startswith("--") and "=" not in arg:
            name = arg[2:].replace("-", "_")
            if i + 1 < len(args) and secret_name(name):
                note_value(args[i + 1])
            continue
        key, eq, value = arg.lstrip("+~-").partition("=")
        if not eq:
            continue
        leaf = key.rsplit(".", 1)[-1].replace("-", "_")
        if _ENV_NAME.search(leaf):
            note_env(value.strip("'\""))
        elif secret_name(leaf):
            note_value(value.strip("'\""))
        elif value.startswith("{"):  # a whole dict given at once: kwargs={api_key:sk-...}
            for m in re.finditer(r"([\w-]+)\s*:\s*['\"]?([^,'\"}\s]+)", value):
                if _ENV_NAME.search(m.group(1)):
                    note_env(m.group(2))
                elif secret_name(m.group(1)):
                    note_value(m.group(2))


def secrets() -> list[str]:
    """Every secret known now, the longest first (a secret holding another is masked whole)."""
    out = set(_values)
    for name in _env_names:
        value = os.environ.get(name)
        if value and len(value) >= MIN_LEN:
            out.add(value)
    forms = set()
    for value in out:
        forms.add(value)
        forms.add(json.dumps(value)[1:-1])  # inside a JSON string
        forms.add(repr(value)[1:-1])  # inside a Python repr
    return sorted(forms, key=len, reverse=True)


def scrub(text: str) -> str:
    """`text` with every known secret replaced by ***."""
    if not text:
        return text
    for value in secrets():
        if value in text:
            text = text.replace(value, MASK)
    return text


def scrub_data(obj: Any) -> Any:
    """A copy of `obj` (dicts, lists, tuples, dataclasses of them) whose strings are scrubbed; `obj` itself
    when no secret is known. For what crosses to another process as objects (the tracker's messages)."""
    if not secrets():
        return obj
    return _scrub_data(obj)


def _scrub_data(obj: Any) -> Any:
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {_scrub_data(k): _scrub_data(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub_data(v) for v in obj]
    if type(obj) is tuple:
        return tuple(_scrub_data(v) for v in obj)
    if hasattr(obj, "__dataclass_fields__") and not isinstance(obj, type):
        import copy

        out = copy.copy(obj)
        for name in obj.__dataclass_fields__:
            if hasattr(obj, name):
                object.__setattr__(out, name, _scrub_data(getattr(obj, name)))
        return out
    return obj


def scrub_bytes(data: bytes) -> bytes:
    for value in secrets():
        raw = value.encode("utf-8", "surrogateescape")
        if raw in data:
            data = data.replace(raw, MASK.encode())
    return data


class RedactFilter:
    """A logging filter for every handler of rlexp's: the record's message, and its traceback, scrubbed. The
    record is changed in place, so each handler after this one sees the scrubbed text."""

    def filter(self, record: Any) -> bool:
        if getattr(record, "_rlexp_scrubbed", False):
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: leave it to logging's own report
            return True
        record.msg, record.args = scrub(message), None
        if record.exc_info and not record.exc_text:
            import logging

            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
            record.exc_info = None  # the formatter would format it again, unscrubbed
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        record._rlexp_scrubbed = True
        return True


class _Stream:
    """A text stream that scrubs each write before the stream beneath gets it; everything else is the stream's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(scrub(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self._inner, name)


def guard_streams() -> None:
    """Scrub everything written to sys.stdout and sys.stderr from now on (a command's own prints, other
    libraries' warnings, a traceback under --debug); the command line's secrets are noted first."""
    note_argv()
    if not isinstance(sys.stdout, _Stream):
        sys.stdout = _Stream(sys.stdout)
    if not isinstance(sys.stderr, _Stream):
        sys.stderr = _Stream(sys.stderr)
