"""Synthetic arithmetic ("a+b="): deterministic from `dataset.seed`, train and eval operand pairs disjoint."""

from __future__ import annotations

import itertools
import random

from rlexp.config.schema import DatasetConfig
from rlexp.data.registry import Row, Splits, register
from rlexp.errors import ConfigError

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _row(a: int, op: str, b: int, idx: int, split: str) -> Row:
    return {
        "id": f"arith-{split}-{idx}",
        "question": f"{a}{op}{b}=",
        "answer": str(_OPS[op](a, b)),
        "data_source": "arith",
    }


@register("arith")
def load_arith(cfg: DatasetConfig) -> Splits:
    max_operand = int(cfg.params.get("max_operand", 9))
    ops = list(cfg.params.get("ops", ["+"]))
    for op in ops:
        if op not in _OPS:
            raise ConfigError("dataset.params.ops", ops, f"use operators from {', '.join(_OPS)}")
    problems = list(itertools.product(range(max_operand + 1), ops, range(max_operand + 1)))
    if cfg.eval_size >= len(problems):
        raise ConfigError("dataset.eval_size", cfg.eval_size, f"only {len(problems)} distinct problems exist")
    rng = random.Random(cfg.seed)
    rng.shuffle(problems)
    held_out, pool = problems[: cfg.eval_size], problems[cfg.eval_size :]
    # Train rows are drawn with replacement from the pairs not held out, so train_size is free.
    train = [_row(*rng.choice(pool), i, "train") for i in range(cfg.train_size)]
    evals = [_row(a, op, b, i, "eval") for i, (a, op, b) in enumerate(held_out)]
    return Splits(train=train, eval=evals)
