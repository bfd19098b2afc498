"""`string_match`: a declarative reward comparing what a completion says with a reference string.

1. extract: `identity` takes the whole completion; `regex` takes the last match of `pattern`
   (group 1 when the pattern has a group). No match scores `wrong_value`.
2. reference: `reference` is a template over the row, `{references.<column>}` (default
   `{references.answer}`, the row's answer).
3. compare (`match`): `exact` (equal), `partial` (the reference is a substring of the extract) or
   `regex` (the reference, as a regular expression, is found in the extract). `case_sensitive`
   and `strip` apply to both sides (not to a regex reference's pattern).
A match scores `correct_value`, anything else `wrong_value`.
"""

from __future__ import annotations

import re
import types
from typing import Any

from rlexp.errors import ConfigError
from rlexp.rewards.judge import placeholders, reference_columns
from rlexp.rewards.registry import RewardFn, register

EXTRACTS = ("identity", "regex")
MATCHES = ("exact", "partial", "regex")


def check_kwargs(key: str, kw: dict[str, Any]) -> None:
    extract, match = kw.get("extract", "identity"), kw.get("match", "exact")
    if extract not in EXTRACTS:
        raise ConfigError(f"{key}.extract", extract, f"use one of {', '.join(EXTRACTS)}")
    if match not in MATCHES:
        raise ConfigError(f"{key}.match", match, f"use one of {', '.join(MATCHES)}")
    if extract == "regex":
        pattern = kw.get("pattern")
        if not pattern:
            raise ConfigError(f"{key}.pattern", pattern, "extract=regex needs a pattern, e.g. 'Answer: (.*)'")
        try:
            re.compile(str(pattern))
        except re.error as err:
            raise ConfigError(f"{key}.pattern", pattern, f"not a regular expression ({err})") from None
    ref = str(kw.get("reference", "{references.answer}"))
    try:
        fields = placeholders(ref)
    except ValueError as err:
        raise ConfigError(f"{key}.reference", ref, f"{err}; write literal braces as {{{{ and }}}}") from None
    for f in fields:
        if not f.startswith("references.") or not f.split(".", 1)[1].isidentifier():
            raise ConfigError(f"{key}.reference", "{" + f + "}", "unknown placeholder; use {references.<column>}")
    for name in ("correct_value", "wrong_value"):
        v = kw.get(name, 1.0 if name == "correct_value" else 0.0)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ConfigError(f"{key}.{name}", v, "use a number")


def _norm(text: str, case_sensitive: bool, strip: bool) -> str:
    text = text.strip() if strip else text
    return text if case_sensitive else text.casefold()


def score_one(text: str, reference: str, *, extract: str = "identity", pattern: str | None = None,
              match: str = "exact", case_sensitive: bool = False, strip: bool = True,
              correct_value: float = 1.0, wrong_value: float = 0.0) -> float:  # fmt: skip
    """The score of one completion against one reference string."""
    if extract == "regex":
        rx = re.compile(str(pattern))
        found = list(rx.finditer(text))
        if not found:
            return wrong_value
        text = (found[-1].group(1) if rx.groups else found[-1].group(0)) or ""
    if match == "regex":
        flags = 0 if case_sensitive else re.IGNORECASE
        return correct_value if re.search(reference, text.strip() if strip else text, flags) else wrong_value
    got, want = _norm(text, case_sensitive, strip), _norm(reference, case_sensitive, strip)
    hit = got == want if match == "exact" else want in got
    return correct_value if hit else wrong_value


@register("string_match", check=check_kwargs)
def string_match(
    extract: str = "identity",
    pattern: str | None = None,
    reference: str = "{references.answer}",
    match: str = "exact",
    case_sensitive: bool = False,
    strip: bool = True,
    correct_value: float = 1.0,
    wrong_value: float = 0.0,
) -> RewardFn:
    """correct_value when the extracted text matches the row's reference, else wrong_value."""
    from rlexp.rewards.http_reward import _column

    check_kwargs(
        "reward.functions[].kwargs",
        {"extract": extract, "pattern": pattern, "reference": reference, "match": match,
         "correct_value": correct_value, "wrong_value": wrong_value},
    )  # fmt: skip
    columns = reference_columns(reference)
    opts = dict(extract=extract, pattern=pattern, match=match, case_sensitive=case_sensitive, strip=strip,
                correct_value=float(correct_value), wrong_value=float(wrong_value))  # fmt: skip

    def fn(prompts: Any, completions: Any, **fields: Any) -> list[float]:
        n = len(completions)
        missing = [c for c in columns if fields.get(c) is None]
        if missing:
            raise ValueError(f"reference uses {{references.{missing[0]}}} but the rows have no {missing[0]!r}")
        refs = {c: _column(fields[c], n) for c in columns}
        out = []
        for i, text in enumerate(_column(completions, n)):
            ref = reference.format(references=types.SimpleNamespace(**{c: refs[c][i] for c in columns}))
            out.append(score_one(str(text), ref, **opts))
        return out

    return fn
