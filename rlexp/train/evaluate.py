"""Evaluation on the eval split: greedy accuracy and sampled pass@1.

pass@1 is the mean correctness of `trainer.eval_samples` completions per prompt sampled at
temperature 1 (top-p 1, no top-k), with fixed seeds so evals before and after training draw the
same noise. Correct means the first configured reward function scores >= `reward.correct_threshold`
(unweighted); greedy accuracy is the same test on one greedy completion per prompt.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rlexp.config.schema import RlexpConfig
from rlexp.rewards.registry import make_reward_fn

EVAL_SEED_OFFSET = 7919  # keeps eval noise independent of training rollouts


def correctness_fn(cfg: RlexpConfig):  # noqa: ANN201
    first = cfg.reward.functions[0]
    fn = make_reward_fn(first.fn, first.kwargs)
    threshold = cfg.reward.correct_threshold

    def correct(prompts: list[str], completions: list[str], rows: list[dict[str, Any]]) -> np.ndarray:
        fields = {k: [r[k] for r in rows] for k in rows[0] if k not in ("prompt",)}
        values = fn(prompts, completions, **fields)
        return np.array([v is not None and float(v) >= threshold for v in values], dtype=np.float64)

    return correct


def evaluate(cluster: Any, rows: list[dict[str, Any]], cfg: RlexpConfig, base_rollout_config: Any) -> dict[str, float]:
    """Greedy accuracy, pass@1, mean completion length (characters) and the share of greedy completions cut
    by `trainer.max_completion_tokens` on `rows`."""
    t = cfg.trainer
    correct = correctness_fn(cfg)
    prompts = [r["prompt"] for r in rows]
    greedy_cfg = dataclasses.replace(base_rollout_config, temperature=1.0, top_p=None, top_k=None, seed=0)
    greedy_out = cluster.rollout.generate(prompts, greedy_cfg)
    greedy = greedy_out.text
    sampled_cfg = dataclasses.replace(base_rollout_config, temperature=1.0, top_p=1.0, top_k=None)
    rep_rows = [r for r in rows for _ in range(t.eval_samples)]
    rollout_rows = (t.rollout_micro_batch_size or t.batch_size) * t.num_generations
    sampled = sample_in_chunks(cluster, [r["prompt"] for r in rep_rows], sampled_cfg, rollout_rows, cfg.seed)
    return {
        "greedy_accuracy": float(correct(prompts, greedy, rows).mean()),
        "pass_at_1": float(correct([r["prompt"] for r in rep_rows], sampled, rep_rows).mean()),
        "mean_length": float(np.mean([len(c) for c in sampled])),
        # greedy completions that used all of max_completion_tokens without ending: the budget cuts answers
        "truncated": float(np.mean([len(tokens) >= t.max_completion_tokens for tokens in greedy_out.tokens])),
    }


def sample_in_chunks(cluster: Any, prompts: list[str], rollout_config: Any, rows: int, seed: int) -> list[str]:
    """Completions of `prompts` sampled in calls of `rows` prompts, the training rollout's batch: with training's
    sampling settings (temperature 1, top-p 1 by default) these calls reuse its compiled prefill and decode
    programs instead of compiling a pair for the eval's size (2.4 s of a first run). The last call is topped up
    with repeats of its first prompt, whose completions are dropped; each call gets a seed of its own (the same
    in every eval of a run). Fewer prompts than `rows` go in one call of their own size."""
    rows = max(1, min(rows, len(prompts)))
    out: list[str] = []
    for i, start in enumerate(range(0, len(prompts), rows)):
        chunk = prompts[start : start + rows]
        config = dataclasses.replace(rollout_config, seed=seed + EVAL_SEED_OFFSET + 1_000_003 * i)
        texts = cluster.rollout.generate(chunk + [chunk[0]] * (rows - len(chunk)), config).text
        out.extend(texts[: len(chunk)])
    return out
