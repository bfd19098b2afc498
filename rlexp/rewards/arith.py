"""Rewards of the synthetic arithmetic task: exact integer answer, and a digits-only format."""

from __future__ import annotations

import re
from typing import Any

from rlexp.rewards.registry import RewardFn, register

_LEADING_INT = re.compile(r"\s*(-?\d+)")
_ONLY_INT = re.compile(r"-?\d+")


def leading_int(text: str) -> int | None:
    m = _LEADING_INT.match(text)
    return int(m.group(1)) if m else None


@register("arith_correct")
def arith_correct() -> RewardFn:
    def arith_correct(prompts: list[str], completions: list[str], answer: Any, **_: Any) -> list[float]:
        return [1.0 if leading_int(c) == int(a) else 0.0 for c, a in zip(completions, answer, strict=True)]

    return arith_correct


@register("arith_format")
def arith_format() -> RewardFn:
    def arith_format(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        return [1.0 if _ONLY_INT.fullmatch(c.strip()) else 0.0 for c in completions]

    return arith_format
