"""The seed recipes' answer normalisation, applied to both sides before math-verify grades them.

`preprocess` = `normalize` then `fix_latex_escaping`, in the seeds' order: keep the text after
the last `=`; join mixed numbers ("7 3/4" -> "7+3/4"); plain-text substitutions (`\\dfrac` ->
`\\frac`, scale words, spaces dropped); unit words and filler removed; `$…$` fractions
unwrapped; `\\text{}`, `\\textbf{}`, `\\overline{}` and `\\boxed{}` unwrapped; shorthand
`\\frac12`/`\\sqrt2` braced; leading-zero, outer-brace, integer-float ("2.0" -> "2") and
thousands-comma fixes; finally LaTeX commands that lost their backslash (or had it turned
into a control character such as a form feed) get it back. The rules are the seeds' own,
quirks included (e.g. every "a " is deleted), because reward parity needs the same strings.
"""

from __future__ import annotations

import re

# (old, new) plain replacements, applied in order.
_SUBSTITUTIONS = (
    ("\\\\", "\\"),
    ("\\tfrac", "\\frac"),
    ("\\dfrac", "\\frac"),
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" or ", ","),
    (" and ", ","),
    ("million", "*10^6"),
    ("billion", "*10^9"),
    ("trillion", "*10^12"),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
_UNITS = (
    "yard foot feet mile day week month year hour minute second centimeter meter cm mm km inch degree pound cent mph"
).split()
_UNIT_PATTERNS = tuple(re.compile(f"{u}(es)?(s)? *(\\^[0-9]+)?") for u in _UNITS)
_REMOVED = (
    "\\left",
    "\\right",
    "\\!",
    "square",
    "ways",
    "integers",
    "dollars",
    "units",
    "\\ldots",
    "sue",
    "points",
    "digits",
    "gm",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)
_DOLLAR_FRACTION = re.compile(r".*?(\d+)?\s*\$\s*(\d+)?\s*(\\frac\{.*?\}\{.*?\}|\d+/\d+)\s*\$.*")
_UNWRAP = (
    re.compile(r"(\\text\{)(.*?)(\})"),
    re.compile(r"(\\textbf\{)(.*?)(\})"),
    re.compile(r"(\\overline\{)(.*?)(\})"),
    re.compile(r"(\\boxed\{)(.*)(\})"),  # greedy: up to the last closing brace
)
# A control character that was a backslash escape, and the rest of the command it began.
_ESCAPE_FIXES = (
    ("\f", "rac", "\\frac"),
    ("\n", "ewline", "\\newline"),
    ("\n", "e", "\\ne"),
    ("\t", "heta", "\\theta"),
    ("\t", "an", "\\tan"),
    ("\t", "o", "\\to"),
    ("\t", "imes", "\\times"),
    ("\t", "ext", "\\text"),
    ("\t", "extbf", "\\textbf"),
    ("\t", "extit", "\\textit"),
    ("\r", "ightarrow", "\\rightarrow"),
    ("\r", "ightarrow", "\\Rightarrow"),
    ("\b", "eta", "\\beta"),
    ("\b", "ar", "\\bar"),
    ("\b", "inom", "\\binom"),
    ("\b", "oxed", "\\boxed"),
    ("\a", "lpha", "\\alpha"),
    ("\a", "pprox", "\\approx"),
    ("\v", "ec", "\\vec"),
)
_COMMANDS = (
    "frac sqrt pi theta alpha beta gamma delta sum int infty cdot times div pm mp leq geq neq approx equiv sin cos "
    "tan log ln exp lim to rightarrow leftarrow Rightarrow Leftarrow overline underline hat bar vec dot ddot mathbb "
    "mathbf mathrm text textbf textit boxed left right choose binom"
).split()
_BARE_COMMANDS = tuple((re.compile(f"(?<!\\\\)\\b{c}\\b"), f"\\\\{c}") for c in _COMMANDS)


def boxed(text: str) -> str:
    """`\\boxed{text}`, unless the text already starts with `\\boxed{`."""
    return text if text.startswith("\\boxed{") else "\\boxed{" + text + "}"


def _dollar_fraction(m: re.Match) -> str:
    whole = m.group(1) or m.group(2)
    return f"${whole}{m.group(3)}$" if whole else f"${m.group(3)}$"


def normalize(answer: str) -> str:
    """The seeds' canonical spelling of a final answer (see the module docstring)."""
    s = answer.split("=")[-1]
    s = re.sub(r"([0-9]) +([0-9])", r"\1+\2", s)
    for old, new in _SUBSTITUTIONS:
        s = s.replace(old, new)
    for unit in _UNIT_PATTERNS:
        s = unit.sub("", s)
    for expr in _REMOVED:
        s = s.replace(expr, "")
    s = _DOLLAR_FRACTION.sub(_dollar_fraction, s)
    for wrapper in _UNWRAP:
        s = wrapper.sub(r"\2", s)
    s = re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}", s)
    s = re.sub(r"(sqrt)([^{])", r"sqrt{\2}", s)
    s = s.replace("$", "")
    if s.startswith("."):
        s = "0" + s
    s = s.replace("{.", "{0.")
    if len(s) >= 2 and s[0] == "{" and s[-1] == "}":
        s = s[1:-1]
    try:
        f = float(s)
        if abs(f - round(f)) < 1e-7:
            s = str(int(round(f)))
    except (ValueError, OverflowError):
        pass
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s


def fix_latex_escaping(text: str) -> str:
    """Restore LaTeX commands whose backslash became a control character or went missing."""
    for char, rest, command in _ESCAPE_FIXES:
        if char in text:
            text = text.replace(char + rest, command)
    for pattern, replacement in _BARE_COMMANDS:
        text = pattern.sub(replacement, text)
    return text


def preprocess(text: str) -> str:
    """What the seeds hand to math-verify (before wrapping in `\\boxed{}`)."""
    return fix_latex_escaping(normalize(text).strip())
