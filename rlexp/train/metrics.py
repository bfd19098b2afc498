"""Per-step metrics: collect what Tunix records, rename it once, write metrics.jsonl.

Tunix reports scalars through `jax.monitoring` as "<prefix>/<mode>/<name>" at a step
(RL metrics at the global step, actor metrics at the train step; both 0-based). This module is
the one place that maps those names to rlexp's stable names; rlexp steps are 1-based
(step N = the N-th rollout and its trainer.num_iterations optimizer updates; a checkpoint is numbered by updates).
"""

from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from typing import Any

import numpy as np

# Tunix "<prefix>/train/<name>" -> rlexp name. Reward-function names are mapped by rule below.
TUNIX_TO_RLEXP = {
    "rewards/train/sum": "rewards/sum",
    "rewards/train/mean": "rewards/mean",
    "rewards/train/min": "rewards/min",
    "rewards/train/max": "rewards/max",
    # The total (summed) reward per completion, as the seeds log it: score/mean equals rewards/sum;
    # score/min and score/max bound the totals (rewards/min and /max bound single functions).
    "rewards/train/score/mean": "score/mean",
    "rewards/train/score/min": "score/min",
    "rewards/train/score/max": "score/max",
    "completions/train/mean_length": "completions/mean_length",
    "completions/train/max_length": "completions/max_length",
    "completions/train/min_length": "completions/min_length",
    "actor/train/loss": "loss",
    "actor/train/kl": "kl",
    "actor/train/grad_norm": "grad_norm",
    "actor/train/pg_clipfrac": "clip_fraction",
    "actor/train/learning_rate": "lr",
    "perf/train/mean/rollout_time": "perf/rollout_time_sec",
    "perf/train/global_step_time": "perf/tunix_step_time_sec",
    # PPO (Tunix's PPOLearner): its rollout metrics under their own names, and the critic's training
    "generation/train/completions/mean_length": "completions/mean_length",
    "generation/train/completions/max_length": "completions/max_length",
    "generation/train/completions/min_length": "completions/min_length",
    "rewards/train/reward/mean": "ppo/reward_mean",  # the score less the KL penalty (beta > 0)
    "rewards/train/reward_kl_penalty": "ppo/kl_penalty",
    "advantages/train/returns/mean": "ppo/return_mean",
    "advantages/train/old_values/mean": "ppo/value_mean",
    "critic/train/loss": "critic/loss",
    "critic/train/grad_norm": "critic/grad_norm",
    "critic/train/vpred_mean": "critic/value_mean",
    "critic/train/vf_clipfrac": "critic/clip_fraction",
    # Async rollout (trainer.rollout.async_rollout): seconds the actor waited for the next rollout batch.
    "global/train/actor_dequeue_time": "perf/actor_dequeue_time_sec",
}
# Tunix's own names that rlexp drops (duplicates of kept metrics, or not per-step quantities).
_DROPPED = re.compile(r"^(rewards/train/score/|jax/|actor/train/perplexity|perf/train/(sum|mean)/(?!rollout_time))")
_REWARD_FN = re.compile(r"^rewards/train/([^/]+)$")
RLEXP_PREFIX = "rlexp"  # metric_fn outputs: "rlexp/train/<rlexp name with / as __>"


def map_name(tunix_name: str) -> str | None:
    """The rlexp name of a Tunix metric, or None when rlexp does not keep it."""
    if tunix_name in TUNIX_TO_RLEXP:
        return TUNIX_TO_RLEXP[tunix_name]
    if _DROPPED.match(tunix_name):
        return None
    if tunix_name.startswith(f"{RLEXP_PREFIX}/train/"):
        return tunix_name.split("/", 2)[2].replace("__", "/")
    m = _REWARD_FN.match(tunix_name)
    if m:
        return f"rewards/{m.group(1)}/mean"
    return None


def rlexp_metric_key(name: str) -> str:
    """The metric_fn key under which Tunix re-emits an rlexp-computed metric `name`."""
    return f"{RLEXP_PREFIX}/{name.replace('/', '__')}"


def group_stats(rewards: np.ndarray, num_generations: int) -> dict[str, float]:
    """Std of total reward, the share of prompt groups whose completions all scored the same, and its
    complement `learnable_prompt_ratio` (groups whose rewards differ: the only ones GRPO learns from)."""
    groups = np.asarray(rewards, np.float64).reshape(-1, num_generations)
    zero = float(np.mean(np.std(groups, axis=1) < 1e-8))
    return {"rewards/std": float(np.std(groups)), "frac_reward_zero_std": zero, "learnable_prompt_ratio": 1.0 - zero}


class MetricsCollector:
    """A jax.monitoring listener that groups rlexp-named scalars by 1-based step.

    Tunix may register the same backend more than once and reports from two threads;
    values are stored by (step, name), so repeats overwrite and order does not matter.
    """

    def __init__(self, updates_per_step: int = 1) -> None:
        self._lock = threading.Lock()
        self._by_step: dict[int, dict[str, float]] = defaultdict(dict)
        # num_iterations > 1: an actor metric of a step is the mean over its updates (update -> value, by name)
        self._updates: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)
        self.updates_per_step = updates_per_step
        self.active = True

    # --- metrax LoggingBackend protocol (used through MetricsLoggerOptions' custom_backend) ---
    def log_scalar(self, event: str, value: Any, **kwargs: Any) -> None:
        if not self.active:
            return
        name = map_name(event)
        step = kwargs.get("step")
        if name is None or step is None:
            return
        try:
            arr = np.asarray(value, dtype=np.float64).reshape(-1)  # Tunix passes un-aggregated (1,) arrays too
        except (TypeError, ValueError):
            return
        if arr.size == 0:
            return
        v = float(arr[0]) if arr.size == 1 else float(arr.mean())
        # Actor (and PPO's critic) metrics arrive at the 1-based train step, perf metrics after the global step count
        # was incremented (also 1-based); rollout/reward metrics at the 0-based global step.
        step = int(step) if event.startswith(("actor/", "critic/", "perf/")) else int(step) + 1
        with self._lock:
            if event.startswith(("actor/", "critic/")) and self.updates_per_step > 1:
                update, step = step, -(-step // self.updates_per_step)  # updates 1..n are step 1's
                values = self._updates[(step, name)]
                values[update] = v
                v = float(np.mean(list(values.values())))
            self._by_step[step][name] = v

    def close(self) -> None:
        pass

    # --- rlexp side ---
    def add(self, step: int, metrics: dict[str, float]) -> None:
        with self._lock:
            self._by_step[step].update(metrics)

    def pop_until(self, last_step: int) -> list[dict[str, Any]]:
        """Records of every step <= last_step, in order, removed from the collector."""
        with self._lock:
            steps = sorted(s for s in self._by_step if s <= last_step)
            for key in [k for k in self._updates if k[0] <= last_step]:
                del self._updates[key]
            return [{"step": s, **dict(sorted(self._by_step.pop(s).items()))} for s in steps]

    def peek_until(self, last_step: int) -> list[dict[str, Any]]:
        """Copies of the records of every step <= last_step, in order, left in the collector."""
        with self._lock:
            return [
                {"step": s, **dict(sorted(self._by_step[s].items()))} for s in sorted(self._by_step) if s <= last_step
            ]

    def latest(self, name: str) -> float | None:
        with self._lock:
            for s in sorted(self._by_step, reverse=True):
                if name in self._by_step[s]:
                    return self._by_step[s][name]
        return None


def to_json_line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=False, allow_nan=True) + "\n"
