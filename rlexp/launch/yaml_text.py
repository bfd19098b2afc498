"""Block YAML for JSON-like data, byte for byte what `yaml.dump(data, Dumper=<safe dumper without aliases>,
sort_keys=False)` writes, in a fraction of its time.

PyYAML builds a node per value in Python before its C emitter runs: ~3 ms for one JobSet manifest, the largest
per-job cost of a 1,000-job dry run. This writer lays out mappings and sequences as PyYAML does (indent 2,
sequences under a key not indented) and asks PyYAML once per distinct string how to write it (plain or single
quoted). A document with anything whose text could depend on where it stands (a string PyYAML would double-quote
or fold at the 80-column width, an empty or long key, a type other than dict, list, str, int, float, bool and
None) is handed to PyYAML whole, so the output never differs.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

WIDTH = 80  # PyYAML's best_width: a plain or single-quoted scalar may be folded at a space past this column


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Plain YAML for humans and kubectl: no &anchors for values shared between parts of a document."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class _Hard(Exception):
    """A value this writer leaves to PyYAML."""


def dump(data: Any) -> str:
    """`yaml.dump(data, Dumper=_Dumper, sort_keys=False)`."""
    if isinstance(data, dict | list) and data:
        out: list[str] = []
        try:
            (_mapping if isinstance(data, dict) else _sequence)(data, 0, out)
            return "".join(out)
        except _Hard:
            pass
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


@functools.lru_cache(maxsize=65536)
def _string(s: str) -> str | None:
    """How PyYAML writes `s` as a value outside flow context, or None when that is not position-independent."""
    if "\n" in s or "\r" in s:
        return None
    text = yaml.dump(s, Dumper=_Dumper)
    if text == s + "\n":
        return s
    quoted = "'" + s.replace("'", "''") + "'"
    return quoted if text == quoted + "\n" else None


def _scalar(value: Any, column: int) -> str:
    kind = type(value)
    if kind is str:
        text = _string(value)
        if text is None or (" " in text and column + len(text) > WIDTH):
            raise _Hard
        return text
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _Hard
        text = repr(value).lower()
        return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text  # as SafeRepresenter
    if value is None:
        return "null"
    raise _Hard


def _key(key: Any, column: int) -> str:
    if type(key) is not str or not key or len(key) >= 128:
        raise _Hard  # PyYAML writes these as `? key` or decides by its own rules
    return _scalar(key, column)


def _value(value: Any, indent: int, column: int, out: list[str], in_mapping: bool) -> None:
    """A value after `key:` (in_mapping) or `- `, the line written up to `column`."""
    if isinstance(value, dict):
        if not value:
            out.append(" {}\n" if in_mapping else "{}\n")
        elif in_mapping:
            out.append("\n")
            _mapping(value, indent + 2, out)
        else:
            _mapping(value, indent + 2, out, first_inline=True)
    elif isinstance(value, list):
        if not value:
            out.append(" []\n" if in_mapping else "[]\n")
        elif in_mapping:
            out.append("\n")
            _sequence(value, indent, out)  # a sequence under a key starts at the key's column
        else:
            _sequence(value, indent + 2, out, first_inline=True)
    else:
        out.append((" " if in_mapping else "") + _scalar(value, column + (1 if in_mapping else 0)) + "\n")


def _mapping(data: dict, indent: int, out: list[str], first_inline: bool = False) -> None:
    pad = " " * indent
    for i, (key, value) in enumerate(data.items()):
        text = _key(key, indent)
        out.append(("" if first_inline and i == 0 else pad) + text + ":")  # the first key may follow a `- `
        _value(value, indent, indent + len(text) + 1, out, True)


def _sequence(data: list, indent: int, out: list[str], first_inline: bool = False) -> None:
    pad = " " * indent
    for i, value in enumerate(data):
        out.append(("" if first_inline and i == 0 else pad) + "- ")
        _value(value, indent, indent + 2, out, False)
