"""The LLM judge's prompt template: its default and its placeholders, shared by the reward (`rlexp.rewards.judge`)
and the cost estimate (`rlexp.estimates.cost`), which sizes a judge call from the template before anything loads."""

from __future__ import annotations

import string

DEFAULT_TEMPLATE = (
    "You are grading a response to a task.\n"
    "{system_instruction}\n"
    "Task:\n{prompt}\n\n"
    "Response:\n{response}\n\n"
    "Reference answer: {references.answer}\n\n"
    "Reply with one line 'Score: <number between 0 and 1>'."
)


def placeholders(template: str) -> list[str]:
    """The `{...}` fields of a template, in order; raises ValueError on unbalanced braces."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
