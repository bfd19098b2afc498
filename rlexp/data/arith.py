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


@register("sums")
def load_sums(cfg: DatasetConfig) -> Splits:
    """`a+b+c=` with `terms` operands from `min_operand` to `max_operand`: sums the tiny models rarely get right
    alone, and do with a calculator (experiment=tools_demo). Eval rows are problems no train row repeats."""
    terms, lo, hi = (int(cfg.params.get(k, d)) for k, d in (("terms", 3), ("min_operand", 10), ("max_operand", 99)))
    if terms < 2 or not 0 <= lo <= hi:
        raise ConfigError("dataset.params", dict(cfg.params), "use terms >= 2 and 0 <= min_operand <= max_operand")
    rng = random.Random(cfg.seed)

    def row(ops: tuple[int, ...], idx: int, split: str) -> Row:
        q = "+".join(map(str, ops)) + "="
        return {"id": f"sums-{split}-{idx}", "question": q, "answer": str(sum(ops)), "data_source": "sums"}

    held_out: set[tuple[int, ...]] = set()
    while len(held_out) < cfg.eval_size:
        held_out.add(tuple(rng.randint(lo, hi) for _ in range(terms)))
    train = []
    while len(train) < cfg.train_size:
        ops = tuple(rng.randint(lo, hi) for _ in range(terms))
        if ops not in held_out:
            train.append(row(ops, len(train), "train"))
    return Splits(train=train, eval=[row(ops, i, "eval") for i, ops in enumerate(sorted(held_out))])
