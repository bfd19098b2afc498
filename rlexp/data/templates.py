"""Prompt rendering: the data template lays out system prompt and question; the chat template wraps it."""

from __future__ import annotations

from rlexp.config.schema import ChatTemplateConfig
from rlexp.data.registry import Row


def render_prompt(row: Row, chat: ChatTemplateConfig) -> str:
    """The exact text the model is prompted with for one row."""
    text = chat.template.format(question=row["question"], system_prompt=chat.system_prompt)
    if chat.chat is None:
        return text
    import jinja2

    env = jinja2.Environment(autoescape=False, keep_trailing_newline=True)
    messages = [{"role": "user", "content": text}]
    return env.from_string(chat.chat).render(messages=messages, add_generation_prompt=True)


def render_rows(rows: list[Row], chat: ChatTemplateConfig) -> list[Row]:
    return [{**r, "prompt": render_prompt(r, chat)} for r in rows]
