"""The seed recipes' reward stack (MaxText RL): `match_format_exactly`, `match_format_approximately`, `check_numbers`.

Same regexes, extraction order, normalisation and default values as the seeds (rl.yml:
exact answer 1.0, white-space match 1.0, exact format 0.1, partial format 0.0, both penalties
0.0), so a recipe scores here what it scored there. Keyword names are rl.yml's keys.

`check_numbers` extracts the answer in this order: the search scope is the last
`<answer>…</answer>` block, or the whole completion when there is none; in the scope, the
last brace-balanced `\\boxed{…}`, else the first loose `\\boxed 12`-style match; else the last
answer block's text; else the fallback "-1000000", which scores `penalty_incorrect_answer`.
So a `\\boxed{}` outside an existing answer block is ignored. An exact string match scores
`reward_exact_answer`, a match after stripping white space `reward_white_space_format_match`;
anything else is normalised (`normalize`) and graded by math-verify in a GraderPool, and
scores `reward_exact_answer` when equal, else `penalty_incorrect_format` (the starting value).
Unlike the seed, a grader timeout scores NaN (an errored invocation, counted) rather than
silently 0.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rlexp.rewards.grading import GraderPool
from rlexp.rewards.maxtext_normalize import boxed, preprocess
from rlexp.rewards.registry import RewardFn, register

FALLBACK_ANSWER = "-1000000"
SEED_GRADER = "rlexp.rewards.maxtext:math_verify_seed"
_LOOSE_BOXED = re.compile(r"\\boxed\s*\{?\s*([a-zA-Z0-9\.,\-]+)\s*\}?")
_FLAGS = re.MULTILINE | re.DOTALL


def answer_block_regex(solution_start_token: str = "<answer>", solution_end_token: str = "</answer>") -> re.Pattern:
    return re.compile(f"{re.escape(solution_start_token)}(.+?){re.escape(solution_end_token)}", _FLAGS)


def format_regex(
    reasoning_start_token: str = "<reasoning>",
    reasoning_end_token: str = "</reasoning>",
    solution_start_token: str = "<answer>",
    solution_end_token: str = "</answer>",
    reasoning_start_token_in_prompt: bool = False,
) -> re.Pattern:
    """reasoning start, reasoning end, answer start, non-empty answer, answer end; anywhere in the text."""
    opening = "" if reasoning_start_token_in_prompt else re.escape(reasoning_start_token)
    return re.compile(
        f"{opening}.*?{re.escape(reasoning_end_token)}.*?"
        f"{re.escape(solution_start_token)}(.+?){re.escape(solution_end_token)}",
        _FLAGS,
    )


def last_balanced_boxed(text: str) -> str | None:
    """Content of the `\\boxed{…}` whose closing brace comes last (braces matched with a stack)."""
    found, openers = None, []
    for i, ch in enumerate(text):
        if ch == "{":
            openers.append(i)
        elif ch == "}" and openers:
            start = openers.pop()
            if text[:start].endswith("\\boxed"):
                found = text[start + 1 : i].strip()
    return found


def extract_answer(
    completion: str, solution_start_token: str = "<answer>", solution_end_token: str = "</answer>"
) -> str:
    """The seed's answer extraction (order in the module docstring); FALLBACK_ANSWER when none."""
    blocks = answer_block_regex(solution_start_token, solution_end_token).findall(completion)
    scope = blocks[-1] if blocks else completion
    inner = last_balanced_boxed(scope)
    if inner is not None:
        return inner
    loose = _LOOSE_BOXED.search(scope)
    if loose:
        return loose.group(1).strip()
    return blocks[-1].strip() if blocks else FALLBACK_ANSWER


def math_verify_seed(predicted: str, gold: str) -> bool:
    """The seed grader on two `\\boxed{}` strings: sympy equality of the parsed forms, else math-verify."""
    try:
        from math_verify import parse, verify
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
        from sympy import Basic, MatrixBase
        from sympy.parsing import sympy_parser

        targets = (ExprExtractionConfig(), LatexExtractionConfig())
        preds, golds = parse(predicted, targets, parsing_timeout=None), parse(gold, targets, parsing_timeout=None)
        for g in golds:
            for p in preds:
                if isinstance(g, Basic | MatrixBase) and isinstance(p, Basic | MatrixBase):
                    try:
                        if sympy_parser.parse_expr(str(g), evaluate=False) == sympy_parser.parse_expr(
                            str(p), evaluate=False
                        ):
                            return True
                    except Exception:  # noqa: BLE001, S110 - unparseable by sympy: math-verify decides
                        pass
                    # The seed skips math-verify for powers (sympy can take minutes on them).
                    if "**" not in str(g) and "**" not in str(p) and verify(g, p, timeout_seconds=None):
                        return True
                elif verify(g, p, timeout_seconds=None):
                    return True
        return False
    except Exception:  # noqa: BLE001 - the seed scores any grader failure as not equal
        return False


def _golds(answer: Any) -> list[str]:
    """Acceptable answers of one row: a list of them, or one answer."""
    if isinstance(answer, list | tuple):
        return [str(a) for a in dict.fromkeys(answer)]
    tolist = getattr(answer, "tolist", None)  # a numpy scalar or array
    return _golds(tolist()) if callable(tolist) else [str(answer)]


@register("match_format_exactly")
def match_format_exactly(
    reward_exact_format_match: float = 0.1,
    reasoning_start_token: str = "<reasoning>",
    reasoning_end_token: str = "</reasoning>",
    solution_start_token: str = "<answer>",
    solution_end_token: str = "</answer>",
    reasoning_start_token_in_prompt: bool = False,
) -> RewardFn:
    """`reward_exact_format_match` when reasoning then a non-empty answer block appear in that order."""
    pattern = format_regex(
        reasoning_start_token,
        reasoning_end_token,
        solution_start_token,
        solution_end_token,
        reasoning_start_token_in_prompt,
    )

    def match_format_exactly(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        return [reward_exact_format_match if pattern.search(c) else 0.0 for c in completions]

    return match_format_exactly


@register("match_format_approximately")
def match_format_approximately(
    reward_partial_format_match: float = 0.0,
    penalty_incorrect_format: float = 0.0,
    reasoning_start_token: str = "<reasoning>",
    reasoning_end_token: str = "</reasoning>",
    solution_start_token: str = "<answer>",
    solution_end_token: str = "</answer>",
    reasoning_start_token_in_prompt: bool = False,
) -> RewardFn:
    """Per tag: `reward_partial_format_match` if it appears exactly once, else `penalty_incorrect_format`."""
    tags = (reasoning_start_token, reasoning_end_token, solution_start_token, solution_end_token)

    def once(completion: str, i: int) -> bool:
        # A prefilled opening tag is in the prompt, so it counts as present once.
        return (i == 0 and reasoning_start_token_in_prompt) or completion.count(tags[i]) == 1

    def match_format_approximately(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        return [
            sum(reward_partial_format_match if once(c, i) else penalty_incorrect_format for i in range(4))
            for c in completions
        ]

    return match_format_approximately


@register("check_numbers")
def check_numbers(
    reward_exact_answer: float = 1.0,
    reward_white_space_format_match: float = 1.0,
    penalty_incorrect_format: float = 0.0,
    penalty_incorrect_answer: float = 0.0,
    solution_start_token: str = "<answer>",
    solution_end_token: str = "</answer>",
    timeout_s: float = 10.0,
    processes: int = 2,
    grader: str = SEED_GRADER,
) -> RewardFn:
    """Answer correctness as the seeds score it (module docstring); math-verify runs in worker processes."""
    pool: GraderPool | None = None

    def check_numbers(prompts: list[str], completions: list[str], answer: Any, **_: Any) -> list[float]:
        nonlocal pool
        scores = [float(penalty_incorrect_format)] * len(completions)
        slow: list[tuple[int, str, list[str]]] = []
        for i, (completion, gold) in enumerate(zip(completions, answer, strict=True)):
            guess = extract_answer(completion, solution_start_token, solution_end_token)
            if guess == FALLBACK_ANSWER:
                scores[i] = float(penalty_incorrect_answer)
                continue
            golds = _golds(gold)
            if guess in golds:
                scores[i] = max(scores[i], reward_exact_answer)
            if any(guess != g and guess.strip() == g.strip() for g in golds):
                scores[i] = max(scores[i], reward_white_space_format_match)
            if not any(guess.strip() == g.strip() for g in golds):
                slow.append((i, boxed(preprocess(guess)), [boxed(preprocess(g)) for g in golds]))
        if slow:
            if pool is None:
                pool = GraderPool(grader, processes=processes, timeout_s=timeout_s)
                check_numbers.pool = pool  # type: ignore[attr-defined]
            pairs = [(guess, g) for _, guess, golds in slow for g in golds]
            verdicts = iter(pool.grade(pairs))
            for i, _guess, golds in slow:
                row = [next(verdicts) for _ in golds]
                if any(row):
                    scores[i] = max(scores[i], reward_exact_answer)
                elif None in row:
                    scores[i] = math.nan  # a grader timeout or crash: an errored invocation
        return scores

    def close() -> None:
        if pool is not None:
            pool.close()

    check_numbers.pool = None  # type: ignore[attr-defined]
    check_numbers.close = close  # type: ignore[attr-defined]
    return check_numbers
