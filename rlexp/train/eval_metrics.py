"""Eval metrics from scored completions: MaxText's per-eval numbers, unbiased pass@k and maj@k.

Pure Python and numpy, no JAX: `rlexp.train.evaluate` samples and scores, this module counts.
MaxText 0.2.5's `evaluate_rl.score_responses` decides, per prompt and `eval_mode`:
`pass` walks the passes and stops at the first completion that is correct, partially correct and well
formatted, else keeps the last one's three flags; `maj` scores the most common extracted answer (the first
of equally common ones) and counts the format when any completion giving that answer is formatted;
`pass_at_1` takes the fractions over the passes.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

from rlexp.rewards.extract import as_number, extract_answer

EPSILON = 1e-6  # MaxText's utils_rl.EPSILON in the partial-accuracy ratio
MODES = ("pass", "maj", "pass_at_1")


@dataclass(frozen=True)
class Scored:
    """One completion's flags: correct, within 10 % of the gold number, formatted; and its extracted answer."""

    correct: bool
    partial: bool
    formatted: bool
    answer: str | None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021)'s unbiased pass@k of one prompt: 1 - C(n-c, k) / C(n, k) for c correct of n samples."""
    if not 0 <= c <= n:
        raise ValueError(f"correct samples c={c} must lie in [0, n={n}]")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs k in [1, n={n}] samples per prompt")
    if n - c < k:  # every draw of k holds a correct one (c = n included)
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def majority(answers: Sequence[str | None]) -> int:
    """Index of the first completion giving the most common answer (ties: the first answer seen)."""
    top = collections.Counter(answers).most_common(1)[0][0]
    return list(answers).index(top)


def maj_at_k(samples: Sequence[Scored], k: int) -> float:
    """1.0 when the majority answer of the first k samples is correct."""
    if not 1 <= k <= len(samples):
        raise ValueError(f"maj@{k} needs k in [1, n={len(samples)}] samples per prompt")
    first = samples[:k]
    return float(first[majority([s.answer for s in first])].correct)


def mode_scores(passes: Sequence[Scored], mode: str) -> tuple[float, float, float]:
    """(correct, partial, format) of one prompt's passes under MaxText's eval_mode."""
    if not passes:
        return 0.0, 0.0, 0.0
    if mode == "maj":
        pick = majority([s.answer for s in passes])
        formatted = any(s.formatted for s in passes if s.answer == passes[pick].answer)
        return float(passes[pick].correct), float(passes[pick].partial), float(formatted)
    if mode == "pass":
        for s in passes:
            if s.correct and s.partial and s.formatted:
                break
        return float(s.correct), float(s.partial), float(s.formatted)
    if mode == "pass_at_1":
        n = len(passes)
        return tuple(sum(getattr(s, f) for s in passes) / n for f in ("correct", "partial", "formatted"))  # type: ignore[return-value]
    raise ValueError(f"eval_mode {mode!r}: use one of {', '.join(MODES)}")


def answer_of(completion: str) -> str | None:
    """The completion's final answer (an <answer> block, \\boxed{}, ####), else its stripped text."""
    found = extract_answer(completion)
    return found if found is not None else (completion.strip() or None)


def within_ten_percent(answer: str | None, gold: str) -> bool:
    """MaxText's partial correctness: both are numbers and 0.9 <= (pred + eps) / (gold + eps) <= 1.1."""
    if answer is None:
        return False
    pred, ref = as_number(answer.replace(",", "")), as_number(str(gold).replace(",", ""))
    if pred is None or ref is None or float(ref) + EPSILON == 0:
        return False
    return 0.9 <= (float(pred) + EPSILON) / (float(ref) + EPSILON) <= 1.1


def strategy_metrics(per_prompt: Sequence[Sequence[Scored]], mode: str, mean_reward: float) -> dict[str, float]:
    """MaxText's numbers for the strategy's passes: correct, total, accuracy, partial and format accuracy (as
    fractions, MaxText prints percent), and the mean reward over every completion."""
    rows = [mode_scores(p, mode) for p in per_prompt]
    total = len(rows)
    sums = [sum(r[i] for r in rows) for i in range(3)]
    return {
        "correct": float(sums[0]),
        "total": float(total),
        "accuracy": sums[0] / total if total else 0.0,
        "partial_accuracy": sums[1] / total if total else 0.0,
        "format_accuracy": sums[2] / total if total else 0.0,
        "mean_reward": mean_reward,
    }


def sampled_metrics(per_prompt: Sequence[Sequence[Scored]], ks: Sequence[int]) -> dict[str, float]:
    """pass@k (unbiased) and maj@k for each k, averaged over prompts."""
    out: dict[str, float] = {}
    for k in ks:
        out[f"pass_at_{k}"] = sum(pass_at_k(len(p), sum(s.correct for s in p), k) for p in per_prompt) / len(per_prompt)
        out[f"maj_at_{k}"] = sum(maj_at_k(p, k) for p in per_prompt) / len(per_prompt)
    return out
