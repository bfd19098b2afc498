"""Math rewards of the seed recipes: answer correctness (`math`) and the reasoning/answer layout (`format`).

`math` extracts the final answer (rlexp.rewards.extract), decides plain numbers exactly in
process, and sends everything else to math-verify in a GraderPool with a per-call timeout.
A call that times out or crashes scores NaN, which the reward set counts as an errored
invocation (and scores 0), so a hanging grader costs one timeout, never a stalled step.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rlexp.rewards.extract import extract_answer, quick_equal
from rlexp.rewards.grading import DEFAULT_GRADER, GraderPool
from rlexp.rewards.registry import RewardFn, register

_nan = math.nan


@register("math")
def math_reward(
    correct: float = 1.0,
    incorrect: float = 0.0,
    no_answer: float = 0.0,
    timeout_s: float = 10.0,
    processes: int = 2,
    grader: str = DEFAULT_GRADER,
) -> RewardFn:
    """`correct` when the final answer equals the reference (math-verify), `no_answer` when there is none."""
    pool: GraderPool | None = None

    def math_correct(prompts: list[str], completions: list[str], answer: Any, **_: Any) -> list[float]:
        nonlocal pool
        scores: list[float | None] = []
        slow: list[tuple[int, str, str]] = []
        for i, (completion, gold) in enumerate(zip(completions, answer, strict=True)):
            predicted = extract_answer(completion)
            if predicted is None:
                scores.append(no_answer)
                continue
            verdict = quick_equal(predicted, str(gold))
            scores.append(None if verdict is None else (correct if verdict else incorrect))
            if verdict is None:
                slow.append((i, predicted, str(gold)))
        if slow:
            if pool is None:
                pool = GraderPool(grader, processes=processes, timeout_s=timeout_s)
                math_correct.pool = pool  # type: ignore[attr-defined]
            verdicts = pool.grade([(p, g) for _, p, g in slow])
            for (i, _p, _g), verdict in zip(slow, verdicts, strict=True):
                scores[i] = _nan if verdict is None else (correct if verdict else incorrect)
        return [float(s) for s in scores]  # type: ignore[arg-type]

    def close() -> None:
        if pool is not None:
            pool.close()

    math_correct.pool = None  # type: ignore[attr-defined]
    math_correct.close = close  # type: ignore[attr-defined]
    return math_correct


@register("format")
def format_reward(
    reasoning: tuple[str, str] = ("<reasoning>", "</reasoning>"),
    answer: tuple[str, str] = ("<answer>", "</answer>"),
    reasoning_in_prompt: bool = False,
    whole: bool = False,
) -> RewardFn:
    """1.0 when the completion reasons inside the reasoning tags and then answers inside the answer tags.

    `reasoning_in_prompt`: the prompt already opens the reasoning tag (templates that prefill
    `<think>`), so the completion starts inside it. `whole`: nothing may surround the layout.
    """
    opening = "" if reasoning_in_prompt else re.escape(reasoning[0])
    body = f"{opening}.+?{re.escape(reasoning[1])}\\s*{re.escape(answer[0])}(.+?){re.escape(answer[1])}"
    pattern = re.compile(f"^\\s*{body}\\s*$" if whole else body, re.DOTALL)

    def format_layout(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        return [1.0 if (m := pattern.search(c)) and m.group(1).strip() else 0.0 for c in completions]

    return format_layout
