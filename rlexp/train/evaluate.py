"""Evaluation on the eval split: greedy accuracy and sampled pass@1.

pass@1 is the mean correctness of `trainer.eval_samples` completions per prompt sampled at
temperature 1 (top-p 1, no top-k), with a fixed seed so evals before and after training draw the
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
    """Greedy accuracy, pass@1 and mean completion length (characters) on `rows`."""
    t = cfg.trainer
    correct = correctness_fn(cfg)
    prompts = [r["prompt"] for r in rows]
    greedy_cfg = dataclasses.replace(base_rollout_config, temperature=1.0, top_p=None, top_k=None, seed=0)
    greedy = cluster.rollout.generate(prompts, greedy_cfg).text
    n = t.eval_samples
    sampled_cfg = dataclasses.replace(
        base_rollout_config, temperature=1.0, top_p=1.0, top_k=None, seed=cfg.seed + EVAL_SEED_OFFSET
    )
    rep_rows = [r for r in rows for _ in range(n)]
    sampled = cluster.rollout.generate([r["prompt"] for r in rep_rows], sampled_cfg).text
    return {
        "greedy_accuracy": float(correct(prompts, greedy, rows).mean()),
        "pass_at_1": float(correct([r["prompt"] for r in rep_rows], sampled, rep_rows).mean()),
        "mean_length": float(np.mean([len(c) for c in sampled])),
    }
