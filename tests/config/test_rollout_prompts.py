"""TrainerConfig.rollout_prompts: the prompts of one sampling call, sized as Tunix 0.1.7's learner sizes its rollout
micro-batches (`rollout_micro_batch_size or train_micro_batch_size or mini_batch_size or the batch`). The sampled
eval runs in calls of that many prompts x G, so it reuses the rollout's compiled programs, and the cost estimate
counts that many sampling calls."""

from __future__ import annotations

import pytest

from rlexp.estimates.cost import estimate_cost
from tests.helpers import compose_conf


@pytest.mark.parametrize(
    ("overrides", "prompts"),
    [
        ([], 8),  # the batch
        (["trainer.micro_batch_size=4"], 4),  # gradient accumulation samples per micro-batch too
        (["trainer.micro_batch_size=4", "trainer.rollout_micro_batch_size=2"], 2),
        (["trainer.rollout_micro_batch_size=2"], 2),
    ],
)
def test_a_sampling_call_takes_the_rollout_micro_batch(overrides: list[str], prompts: int) -> None:
    assert compose_conf(overrides).trainer.rollout_prompts() == prompts


def test_the_cost_counts_the_micro_batched_rollout_s_calls() -> None:
    """Decoding reads the weights once per token and call: micro-batched, more calls of fewer prompts."""
    whole, micro = (
        estimate_cost(compose_conf(["model=qwen3_0_6b", "slice=v5p-8", *o]))
        for o in ([], ["trainer.micro_batch_size=4"])
    )
    assert whole["step_time_source"].startswith("roofline")
    assert micro["step_time_s"] > whole["step_time_s"]


def test_the_kv_cache_holds_one_sampling_call() -> None:
    """Tunix allocates the cache per sampling call: a quarter of the batch a call, a quarter of the cache."""
    from rlexp.estimates.memory import estimate_memory

    whole, micro = (estimate_memory(compose_conf(o)) for o in ([], ["trainer.rollout_micro_batch_size=2"]))
    assert micro["kv_cache"] * 4 == whole["kv_cache"] > 0
    assert micro["activations"] == whole["activations"]  # a training pass still takes the whole batch
