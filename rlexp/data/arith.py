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


MAX_ARITH_OPERAND = 999  # every problem is listed: (999 + 1)^2 pairs per operator is still quick


def _int_param(cfg: DatasetConfig, name: str, default: int, lo: int, hi: int | None = None) -> int:
    """`dataset.params.<name>` as an integer in [lo, hi], or one ConfigError naming it."""
    value = cfg.params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        span = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ConfigError(f"dataset.params.{name}", value, f"use an integer {span}")
    return value


@register("arith")
def load_arith(cfg: DatasetConfig) -> Splits:
    max_operand = _int_param(cfg, "max_operand", 9, 0, MAX_ARITH_OPERAND)
    ops = list(cfg.params.get("ops", ["+"]))
    for op in ops:
        if op not in _OPS:
            raise ConfigError("dataset.params.ops", ops, f"use operators from {', '.join(_OPS)}")
    problems = list(itertools.product(range(max_operand + 1), ops, range(max_operand + 1)))
    if cfg.eval_size >= len(problems):  # operands 0..n give (n + 1)^2 pairs per operator
        need = next(n for n in range(MAX_ARITH_OPERAND + 1) if (n + 1) ** 2 * len(ops) > cfg.eval_size)
        raise ConfigError(
            "dataset.params.max_operand",
            max_operand,
            f"gives only {len(problems)} distinct problems, not more than dataset.eval_size={cfg.eval_size}; raise "
            f"it to >= {need} or lower dataset.eval_size",
        )
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
    terms, lo = _int_param(cfg, "terms", 3, 2), _int_param(cfg, "min_operand", 10, 0)
    hi = _int_param(cfg, "max_operand", 99, lo)
    if (hi - lo + 1) ** terms <= cfg.eval_size:  # the held-out draw below would never end
        raise ConfigError(
            "dataset.params.max_operand",
            hi,
            f"operands {lo}..{hi} give only {(hi - lo + 1) ** terms} distinct sums of {terms}, not more than "
            f"dataset.eval_size={cfg.eval_size}; widen the range or lower dataset.eval_size",
        )
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
