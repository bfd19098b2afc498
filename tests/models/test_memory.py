"""Per-chip memory estimate: components, sharding, LoRA and reference accounting, and the fit check."""

from __future__ import annotations

import dataclasses

import pytest

from rlexp.errors import ConfigError
from rlexp.estimates.memory import GIB, check_fits, estimate_memory, format_estimate, kv_cache_bytes_per_sequence
from tests.helpers import compose_conf

# the seed recipes' shapes, spelled out so the test does not move when a preset changes
GPT_OSS = ["model=gpt_oss_20b", "slice=v5p-64", "trainer.batch_size=16", "trainer.num_generations=2",
           "trainer.beta=0.08", "trainer.max_prompt_tokens=256", "trainer.max_completion_tokens=768"]  # fmt: skip
GEMMA = ["model=gemma4_e4b", "slice=v6e-32", "trainer.max_prompt_tokens=512", "trainer.max_completion_tokens=3584"]


def test_gpt_oss_20b_on_v5p_64_fits_with_the_published_numbers():
    cfg = compose_conf(GPT_OSS)
    est = check_fits(cfg)
    chips = est["trainer_chips"]
    assert chips == 16 and est["capacity"] == 95 * GIB
    assert est["param_count"] == pytest.approx(20.91e9, rel=1e-3)
    assert est["params"] == est["param_count"] * 2 // chips  # bf16 weights, fully sharded
    assert est["optimizer"] == 2 * est["params"] and est["gradients"] == est["params"]
    assert est["reference"] == est["params"]  # beta > 0: a frozen copy
    parts = ("params", "optimizer", "gradients", "reference", "critic", "kv_cache", "activations")
    assert est["total"] == sum(est[k] for k in parts) and est["critic"] == 0  # a critic only for trainer=ppo
    line = format_estimate(est)
    assert "gpt_oss_20b on v5p-64" in line and "capacity 95.0 GiB" in line


def test_lora_trains_few_weights_and_drops_the_reference_copy():
    full = estimate_memory(compose_conf(GPT_OSS))
    lora = estimate_memory(compose_conf([*GPT_OSS, "trainer.lora.rank=16"]))
    assert lora["trainable_param_count"] < full["param_count"] / 100
    assert lora["optimizer"] < full["optimizer"] / 100 and lora["reference"] == 0
    no_kl = estimate_memory(compose_conf([*GPT_OSS, "trainer.beta=0"]))
    assert no_kl["reference"] == 0


def test_gemma4_kv_cache_counts_sliding_windows_and_shared_layers():
    m = compose_conf(GEMMA).model
    per_seq = kv_cache_bytes_per_sequence(m, 4096)
    # 24 layers hold KV (18 share): 4 global at 4096 tokens x 512 dims, 20 sliding at 512 tokens x 256 dims
    expected = 2 * 2 * 2 * (4 * 4096 * 512 + 20 * 512 * 256)  # k+v, 2 kv heads, bf16
    assert per_seq == expected


def test_a_config_that_cannot_fit_fails_with_the_numbers():
    cfg = compose_conf(GPT_OSS)
    cfg.slice = dataclasses.replace(cfg.slice, hbm_gib_per_device=8.0)
    with pytest.raises(ConfigError) as err:
        check_fits(cfg)
    msg = str(err.value)
    assert "does not fit" in msg and "capacity 8.0 GiB" in msg and "params 2.43" in msg
    assert "\n" not in msg


def test_unknown_capacity_never_fails():
    est = check_fits(compose_conf([]))  # tiny on the local CPU
    assert est["capacity"] is None and est["param_count"] == 124_352


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma4_e4b", "gpt_oss_20b"])  # the seed models; qwen3/llama3 match too
def test_param_count_equals_the_built_models(name):
    """The pure-Python count matches the nnx model rlexp builds (abstract shapes only, no weights)."""
    import jax
    import numpy as np
    from flax import nnx

    from rlexp.estimates.model_terms import param_count
    from rlexp.families.load import tunix_config

    m = compose_conf([f"model={name}"]).model
    classes = {"qwen3": "rlexp.models.tunix_text:Qwen3", "llama3": "rlexp.models.tunix_text:Llama3",
               "gemma4": "tunix.models.gemma4.model:Gemma4", "gpt_oss": "rlexp.models.gpt_oss.model:GptOss"}  # fmt: skip
    module, cls = classes[m.family].split(":")
    model_cls = getattr(__import__(module, fromlist=[cls]), cls)
    cfg = tunix_config(m)
    abstract = nnx.eval_shape(lambda: model_cls(cfg, rngs=nnx.Rngs(0)))
    built = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(nnx.state(abstract, nnx.Param)))
    assert param_count(m) == built


@pytest.mark.parametrize(
    ("preset", "billions", "total_gib", "kv_gib"),
    [("gemma4_26b_a4b_omi2", 25.23, 26.59, 5.62), ("qwen3_30b_a3b_omi2", 30.53, 59.54, 12.00)],
)
def test_the_moe_recipes_fit_v7x_devices(preset: str, billions: float, total_gib: float, kv_gib: float) -> None:
    """Every expert is a weight the trainer holds (sharded over 64 devices of 96 GiB); the KV cache of 128 x 8
    rollouts of 8192 tokens counts gemma4's 2-head global layers and qwen3's 4 KV heads."""
    est = check_fits(compose_conf([f"experiment={preset}"]))
    assert est["trainer_chips"] == 64 and est["capacity"] == 96 * GIB
    assert est["param_count"] / 1e9 == pytest.approx(billions, abs=0.01)
    assert est["total"] / GIB == pytest.approx(total_gib, abs=0.01)
    assert est["kv_cache"] / GIB == pytest.approx(kv_gib, abs=0.01)
    with pytest.raises(ConfigError, match="does not fit; largest is activations"):
        check_fits(compose_conf([f"experiment={preset}", "model.remat=none", "trainer.micro_batch_size=64"]))


def test_batches_sampled_ahead_count_the_queue_and_the_staged_weights():
    """trainer.off_policy.max_staleness=k: k queued batches on the trainer's chip; with rollout devices of their own
    a staged copy of the weights on each rollout device (rlexp.algorithms.off_policy)."""
    from rlexp.estimates.cost import roofline_step_s

    base = estimate_memory(compose_conf(GEMMA))
    k2 = estimate_memory(compose_conf([*GEMMA, "trainer.off_policy.max_staleness=2"]))
    sequences, tokens = 8 * 8, 512 * 5 + 3584 * (5 + 4) + 4  # int32 ids and bool masks; the reference's logps
    assert base["off_policy"] == 0 and k2["off_policy"] == 2 * sequences * tokens
    assert k2["total"] == base["total"] + k2["off_policy"] and "off_policy" in format_estimate(k2)
    assert "off_policy" not in format_estimate(base)
    apart = [*GEMMA, "slice.rollout_devices=16"]
    sync, ahead = (estimate_memory(compose_conf([*apart, f"trainer.off_policy.max_staleness={k}"])) for k in (0, 1))
    from rlexp.estimates.model_terms import BYTES

    cfg = compose_conf(apart)
    staged = ahead["param_count"] * BYTES[cfg.model.param_dtype] // 16  # the weights over the 16 rollout devices
    assert ahead["off_policy_staged_weights"] == staged and "off_policy_staged_weights" not in sync
    assert ahead["rollout_chip_total"] == sync["rollout_chip_total"] + staged
    # the roofline step: rollout + update in turn, the longer of the two when a thread samples ahead
    in_turn = roofline_step_s(compose_conf([*apart, "trainer.off_policy.max_staleness=0"]))
    overlapped = roofline_step_s(compose_conf([*apart, "trainer.off_policy.max_staleness=1"]))
    assert 0.5 * in_turn <= overlapped < in_turn
