"""An environment's prompt and turn lengths, for the memory and cost estimates (rlexp.estimates.lengths).

A kind module's optional `lengths(conf)` says them; without it the estimates take the config's caps. Generated
rows (reasoning_gym) are measured here as the session will see them: rendered through the run's templates,
filtered by `trainer.max_prompt_tokens`, and padded to `prompt_width` (the longest prompt plus BOS, rounded up to
8), over at most MEASURED_ROWS rows a split. Without the model's tokenizer on this machine the prompts' UTF-8
bytes stand in for their tokens (a tokenizer gives at most one token a byte, bar special tokens), still capped by
`trainer.max_prompt_tokens`. Turns are the
agent's (`agent.max_turns` turns of `agent.max_turn_tokens`, within `trainer.max_completion_tokens`). Measured
once per config in a process: the run's plan and `rlexp validate` report the same numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlexp.config.schema import RlexpConfig
from rlexp.data.registry import Splits
from rlexp.estimates.lengths import Lengths, config_lengths

MEASURED_ROWS = 4096  # rows measured per split at most (reasoning_gym: each task's first rows), ~0.3 s
_MEASURED: dict[str, Lengths] = {}  # repr(conf) -> its lengths: the plan and the preflight measure once


def measured_prompts(conf: RlexpConfig, splits: Splits, tools_system: str | None = None) -> Lengths:
    """The caps, with the prompt length measured over `splits` (the env's generated rows)."""
    key = repr(conf)
    if key in _MEASURED:
        return _MEASURED[key]
    from rlexp.data.templates import prompt_width, render_splits
    from rlexp.models.loader import local_tokenizer

    t = conf.trainer
    tokenizer = local_tokenizer(conf.model)
    rendered = render_splits(
        splits, conf.data_template, conf.chat_template, tokenizer, t.max_prompt_tokens, tools_system
    )
    prompts = [r["prompt"] for r in rendered.train + rendered.eval]
    if tokenizer is not None:
        width = prompt_width(prompts, tokenizer, t.max_prompt_tokens)
        how = "tokens"
    else:
        width = min(t.max_prompt_tokens, max((len(p.encode()) for p in prompts), default=0) + 1)
        how = f"UTF-8 bytes (model {conf.model.name}'s tokenizer is not here)"
    caps = config_lengths(conf)
    out = dataclasses.replace(
        caps, prompt=width, source=f"env={conf.env.name}: the longest of {len(prompts)} prompts in {how}"
    )
    _MEASURED[key] = out
    return out


def env_lengths(conf: RlexpConfig, module: Any) -> Lengths | None:
    """The env kind's lengths, or None (the config's caps)."""
    if module is None or not hasattr(module, "lengths"):
        return None
    return module.lengths(conf)
