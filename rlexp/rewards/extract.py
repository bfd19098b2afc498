"""Final-answer extraction and the cheap, exact part of answer grading.

`extract_answer` finds what a completion answered: the last `<answer>…</answer>` block (a
`\\boxed{}` inside it wins), else the last brace-balanced `\\boxed{…}`, else the text after
the last `####`. `normalize` strips what does not change the value (dollar signs, units,
`\\text{}`, thousands separators, `x =`), and `quick_equal` decides every pair that is a
plain number on both sides exactly, with fractions; anything else (expressions, LaTeX) is
left to math-verify in a worker pool (rlexp.rewards.grading).
"""

from __future__ import annotations

import re
from fractions import Fraction

_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_HASHES = re.compile(r"####\s*([^\n]+)")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` whose braces balance; None when there is none."""
    for m in reversed(list(_BOXED.finditer(text))):
        depth, start = 1, m.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
    return None


def extract_answer(completion: str) -> str | None:
    """The completion's final answer as written, or None when it gives none."""
    blocks = _ANSWER_BLOCK.findall(completion)
    if blocks:
        inner = blocks[-1]
        boxed = last_boxed(inner)
        answer = boxed if boxed is not None else inner.strip()
        return answer or None
    boxed = last_boxed(completion)
    if boxed:
        return boxed
    hashes = _HASHES.findall(completion)
    if hashes:
        return hashes[-1].strip() or None
    return None


_REPLACEMENTS = (
    (re.compile(r"\\[dt]frac"), r"\\frac"),
    (re.compile(r"\\left|\\right|\\!|\\,|\\;|\\ "), ""),
    (re.compile(r"\\text\{\s*[^{}]*\}|\\mbox\{[^{}]*\}|\\mathrm\{\s*[a-zA-Z ]*\}"), ""),  # units in \text{}
    (re.compile(r"\^\s*\{?\\circ\}?|°"), ""),
    (re.compile(r"\\%|%"), ""),
    (re.compile(r"\\\$|\$"), ""),
    (re.compile(r"\{,\}"), ","),
    (re.compile("\u2212"), "-"),  # unicode minus sign
)
_THOUSANDS = re.compile(r"(?<![\d.])-?\d{1,3}(?:,\d{3})+(?![\d,])")
_NUMBER_WITH_UNIT = re.compile(r"^(-?[\d.,/]*\d)\s*[a-zA-Z][a-zA-Z .]*$")
_STRIP_WRAPPERS = re.compile(r"^\\(?:textbf|mathbf|overline|boxed)\{(.*)\}$", re.DOTALL)


def normalize(answer: str) -> str:
    """A canonical spelling of an answer: same value, fewer ways to write it."""
    s = answer.strip().strip(".")
    m = _STRIP_WRAPPERS.match(s)
    while m:
        s = m.group(1).strip()
        m = _STRIP_WRAPPERS.match(s)
    for pattern, repl in _REPLACEMENTS:
        s = pattern.sub(repl, s)
    s = s.replace("\\(", "").replace("\\)", "").strip()
    if "=" in s and "\\" not in s.split("=")[-1] and s.split("=")[-1].strip():
        s = s.split("=")[-1].strip()  # "x = 5" -> "5"
    s = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), s)
    m = _NUMBER_WITH_UNIT.match(s)
    if m:
        s = m.group(1)  # "72 dollars" -> "72"
    return s.strip().rstrip(".")


_FRAC = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}$")
_PLAIN = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)(/-?\d+)?$")


def as_number(text: str) -> Fraction | None:
    """The exact value of a plain number, decimal, a/b or \\frac{a}{b}; None for anything else."""
    s = text.replace(" ", "")
    m = _FRAC.match(s)
    try:
        if m:
            value = Fraction(int(m.group(2)), int(m.group(3)))
            return -value if m.group(1) else value
        if _PLAIN.match(s):
            return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return None


def quick_equal(predicted: str, gold: str) -> bool | None:
    """True/False when both sides are plain numbers (or spelled identically); None: needs math-verify."""
    p, g = normalize(predicted), normalize(gold)
    if p == g:
        return True
    pn, gn = as_number(p), as_number(g)
    if pn is not None and gn is not None:
        return pn == gn
    return None
