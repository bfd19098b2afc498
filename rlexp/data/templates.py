"""Prompt rendering: the data template lays out system prompt and question; the chat template wraps it.

The data template (`data_template.system_prompt`, `data_template.template`, chosen with
`data_template=`) is model-independent text; the chat template (`chat_template.chat`, a
Jinja string) adds the model's turn markers around it as one user message. With a Hugging
Face tokenizer at hand the Jinja runs through `tokenizer.apply_chat_template`, so
`bos_token` and the helper functions are the tokenizer's own; without one, through an
environment configured the same way. `chat: tokenizer` uses the template the tokenizer ships.

`doubled_markers` finds the seeds' known failure: a data template that already contains turn
markers, wrapped by a chat template that adds them again; the preflight reports it and training
refuses to start with it (`check_turn_markers`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

from rlexp.compat.chat_jinja import compiled_chat_template
from rlexp.config.schema import ChatTemplateConfig, DataTemplateConfig
from rlexp.data.registry import Row, Splits
from rlexp.errors import ConfigError

# Turn markers of the chat formats rlexp ships; a data template must contain none of them
# when a chat template wraps it.
KNOWN_MARKERS = (
    "<start_of_turn>",
    "<end_of_turn>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
)


def data_text(row: Row, data: DataTemplateConfig) -> str:
    """The data template filled with the row's question: the content of the single user message."""
    try:
        return data.template.format(question=row["question"], system_prompt=data.system_prompt)
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(
            "data_template.template", data.template, f"may use only {{question}} and {{system_prompt}} ({err!r})"
        ) from err


def _uses_tokenizer_template(tokenizer: Any) -> bool:
    return tokenizer is not None and hasattr(tokenizer, "apply_chat_template")


def render_prompt(
    row: Row, data: DataTemplateConfig, chat: ChatTemplateConfig, tokenizer: Any = None, system: str | None = None
) -> str:
    """The exact text the model is prompted with for one row; a Jinja error names the template, its line and
    the row. `system`: a system message before the user's (the offered tools, rlexp.tools.toolbox.tools_prompt)."""
    from jinja2.exceptions import TemplateError

    try:
        return _render(row, data, chat, tokenizer, system)
    except TemplateError as err:
        line = getattr(err, "lineno", None) or _jinja_line(err)
        where = f"line {line} of " if line else ""
        raise ConfigError(
            "chat_template.chat",
            f"<{chat.name}>",
            f"{where}the template fails on row {row.get('id')!r}: {str(err).splitlines()[0]}; fix the template",
        ) from None


def _jinja_line(err: BaseException) -> int | None:
    """The template line a Jinja runtime error was raised on (its traceback's `<template>` frame)."""
    tb, line = err.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _render(row: Row, data: DataTemplateConfig, chat: ChatTemplateConfig, tokenizer: Any, system: str | None) -> str:
    text = data_text(row, data)
    if chat.chat is None:
        return text if system is None else f"{system}\n\n{text}"
    messages = [{"role": "user", "content": text}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    if chat.chat == "tokenizer":
        if not _uses_tokenizer_template(tokenizer):
            raise ConfigError("chat_template.chat", "tokenizer", "needs the model's Hugging Face tokenizer")
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                "chat_template.chat",
                "tokenizer",
                "this tokenizer ships no chat template (base models); pick chat_template=gemma, chatml, llama3, ...",
            )
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if _uses_tokenizer_template(tokenizer):
        return tokenizer.apply_chat_template(
            messages, chat_template=chat.chat, tokenize=False, add_generation_prompt=True
        )
    return compiled_chat_template(chat.chat).render(
        messages=messages, add_generation_prompt=True, bos_token=chat.bos_token
    )


def doubled_markers(row: Row, data: DataTemplateConfig, chat: ChatTemplateConfig, prompt: str) -> list[str]:
    """Problems with turn markers in one rendered prompt; empty when the prompt is well formed."""
    problems = []
    markers = tuple(dict.fromkeys((*chat.turn_markers, *KNOWN_MARKERS)))
    if chat.chat is not None:
        inner = [m for m in markers if m in data_text(row, data)]
        if inner:
            problems.append(
                f"the data template already contains turn markers {inner} and chat template "
                f"{chat.name!r} adds its own: remove them from data_template.template"
            )
    for m in markers:
        # A marker, an optional role word, then the same marker again: "<start_of_turn>user\n<start_of_turn>".
        if re.search(re.escape(m) + r"[A-Za-z_]*\s*" + re.escape(m), prompt):
            problems.append(f"turn marker {m!r} appears twice in a row")
    return problems


MARKER_ROWS = 64  # the guard's sample: doubled markers come from the templates, so every row shows them


def marker_problems(rows: Iterable[Row], data: DataTemplateConfig, chat: ChatTemplateConfig) -> list[str]:
    """`doubled_markers` over rendered rows (each with its `prompt`), every distinct problem once."""
    found: dict[str, None] = {}
    for r in rows:
        found.update(dict.fromkeys(doubled_markers(r, data, chat, r["prompt"])))
    return list(found)


def check_turn_markers(rows: list[Row], data: DataTemplateConfig, chat: ChatTemplateConfig, tokenizer: Any) -> None:
    """The preflight's turn-marker guard, for training: the first rows rendered (before the length filter, which
    doubled markers may empty), and the run refused in one line before its first step."""
    sample = render_rows(rows[:MARKER_ROWS], data, chat, tokenizer)
    problems = marker_problems(sample, data, chat)
    if problems:
        raise ConfigError(
            "data_template",
            data.name,
            f"with chat_template={chat.name} the prompts are malformed: {'; '.join(problems)}",
        )


def prompt_tokens(tokenizer: Any, prompt: str) -> int:
    """Prompt length as the sampler sees it (the tokenizer's encode, special tokens included)."""
    return len(tokenizer.encode(prompt))


def prompt_width(prompts: list[str], tokenizer: Any, limit: int) -> int:
    """Tokens every prompt is left-padded to: the longest prompt plus BOS, rounded up to 8, at most `limit`.

    Tunix pads prompts to RolloutConfig.max_prompt_length and trains on that width, so padding the
    default run's 7-token prompts to trainer.max_prompt_tokens=16 made a third of every rollout,
    reference and policy pass pad. The width is fixed for the run (one compiled shape), and an upper
    bound: the sampler prepends BOS unless the tokenizer already did.
    """
    if not prompts:
        return limit
    longest = max(len(ids) for ids in tokenizer(list(prompts))["input_ids"]) + 1
    return min(limit, -(-longest // 8) * 8)


def render_rows(
    rows: Iterable[Row],
    data: DataTemplateConfig,
    chat: ChatTemplateConfig,
    tokenizer: Any = None,
    *,
    max_prompt_tokens: int | None = None,
    skipped: dict[str, int] | None = None,
    limit: int | None = None,
    system: str | None = None,
) -> list[Row]:
    """Rows with `prompt` filled in; with a tokenizer and a budget, longer prompts are dropped and counted.

    `limit`: stop once that many rows are kept (rows after it are neither rendered nor counted).
    """
    out: list[Row] = []
    for r in rows:
        if limit is not None and len(out) >= limit:
            break
        prompt = render_prompt(r, data, chat, tokenizer, system)
        if tokenizer is not None and max_prompt_tokens and prompt_tokens(tokenizer, prompt) > max_prompt_tokens:
            if skipped is not None:
                skipped["prompt_too_long"] = skipped.get("prompt_too_long", 0) + 1
            continue
        out.append({**r, "prompt": prompt})
    return out


def render_splits(
    splits: Splits,
    data: DataTemplateConfig,
    chat: ChatTemplateConfig,
    tokenizer: Any = None,
    max_prompt_tokens: int | None = None,
    system: str | None = None,
) -> Splits:
    """Both splits rendered and length-filtered, then capped: a dropped prompt is replaced by a spare row.

    Each split keeps as many rows as the loader capped it to (`len(splits.train)`), drawn in
    order from its rows and then its spares, so a capped split loses nothing to the filter
    unless the data runs out. The skip counts grow by the prompts that were too long.
    """
    skipped = dict(splits.skipped)

    def render(rows: list[Row], spares: list[Row]) -> list[Row]:
        kept = itertools.chain(rows, spares)
        return render_rows(
            kept,
            data,
            chat,
            tokenizer,
            max_prompt_tokens=max_prompt_tokens,
            skipped=skipped,
            limit=len(rows),
            system=system,
        )

    out = Splits(
        train=render(splits.train, splits.spare_train), eval=render(splits.eval, splits.spare_eval), skipped=skipped
    )
    for name, kept, rows in (("train", out.train, splits.train), ("eval", out.eval, splits.eval)):
        if rows and not kept and skipped.get("prompt_too_long"):
            _every_prompt_too_long(name, [*rows, *getattr(splits, f"spare_{name}")], data, chat, tokenizer,
                                   max_prompt_tokens, system)  # fmt: skip
    return out


def _every_prompt_too_long(
    split: str, rows: list[Row], data: DataTemplateConfig, chat: ChatTemplateConfig, tokenizer: Any,
    max_prompt_tokens: int | None, system: str | None,
) -> None:  # fmt: skip
    """The length filter left a split with no row: name the budget and the prompts' lengths, not the steps or the
    eval split that come out empty later."""
    lengths = [prompt_tokens(tokenizer, render_prompt(r, data, chat, tokenizer, system)) for r in rows]
    raise ConfigError(
        "trainer.max_prompt_tokens",
        max_prompt_tokens,
        f"every prompt of the {split} split is longer ({len(rows)} prompts of {min(lengths)} to {max(lengths)} tokens, "
        f"as rendered by data_template and chat_template); raise it to at least {min(lengths)} "
        f"(all: {max(lengths)}), with model.max_context >= max_prompt_tokens + trainer.max_completion_tokens",
    )
