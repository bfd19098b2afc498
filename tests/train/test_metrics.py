"""The one place that renames Tunix metrics, and the step alignment of the collector."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.train.metrics import MetricsCollector, group_stats, map_name, rlexp_metric_key


@pytest.mark.parametrize(
    ("tunix", "rlexp"),
    [
        ("rewards/train/sum", "rewards/sum"),
        ("rewards/train/mean", "rewards/mean"),
        ("rewards/train/arith_correct", "rewards/arith_correct/mean"),
        ("completions/train/mean_length", "completions/mean_length"),
        ("actor/train/loss", "loss"),
        ("actor/train/kl", "kl"),
        ("actor/train/grad_norm", "grad_norm"),
        ("perf/train/mean/rollout_time", "perf/rollout_time_sec"),
        ("rlexp/train/frac_reward_zero_std", "frac_reward_zero_std"),  # from rlexp's metric_fn
        ("rlexp/train/rewards__math__clip_ratio", "rewards/math/clip_ratio"),
        ("rewards/train/score/mean", "score/mean"),  # the seeds' name for the mean total reward
        ("rewards/train/score/max", "score/max"),
        ("rewards/train/score/other", None),
        ("jax/core/compile/backend_compile_duration", None),
        ("actor/train/perplexity", None),
    ],
)
def test_name_map(tunix: str, rlexp: str | None) -> None:
    assert map_name(tunix) == rlexp


def test_metric_fn_keys_round_trip() -> None:
    # Tunix logs a metric_fn key "<prefix>/<name>" as "<prefix>/train/<name>"
    prefix, name = rlexp_metric_key("rewards/http/errors").split("/", 1)
    assert map_name(f"{prefix}/train/{name}") == "rewards/http/errors"


def test_collector_aligns_rl_and_actor_steps() -> None:
    c = MetricsCollector()
    c.log_scalar("rewards/train/sum", np.float32(0.5), step=0)  # global step 0 = rlexp step 1
    c.log_scalar("rewards/train/score/mean", np.float32(0.5), step=0)  # the same total, under the seeds' name
    c.log_scalar("actor/train/loss", 0.25, step=1)  # actor metrics are already 1-based
    c.log_scalar("rewards/train/sum", 0.75, step=1)
    c.log_scalar("rewards/train/sum", 0.75, step=1)  # Tunix may deliver twice: no duplicate
    c.log_scalar("jax/core/compile/x", 3.0, step=0)
    c.log_scalar("perf/train/mean/rollout_time", np.array([0.125]), step=1)  # un-aggregated (1,) array, 1-based
    c.add(2, {"eval/pass_at_1": 0.4})
    first = {"step": 1, "loss": 0.25, "perf/rollout_time_sec": 0.125, "rewards/sum": 0.5, "score/mean": 0.5}
    assert c.pop_until(1) == [first]
    assert c.latest("rewards/sum") == 0.75
    assert c.pop_until(10) == [{"step": 2, "eval/pass_at_1": 0.4, "rewards/sum": 0.75}]
    assert c.pop_until(10) == []


def test_group_stats() -> None:
    rewards = np.array([1, 1, 1, 1, 0, 1, 0, 1], dtype=float)  # groups of 4: constant, mixed
    s = group_stats(rewards, 4)
    assert s["frac_reward_zero_std"] == 0.5
    assert s["rewards/std"] == pytest.approx(np.std(rewards))
