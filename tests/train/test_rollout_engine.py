"""trainer.rollout: engine choice, the vLLM mapping onto Tunix's RolloutConfig (built, never run: vLLM needs a
TPU slice), the validation rules, and async rollout on separate CPU devices (slow: a real run)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlexp.config.validate import validate
from rlexp.errors import ConfigError
from rlexp.train.metrics import map_name
from tests.helpers import compose_conf, run_rlexp

TOKENIZER = SimpleNamespace(eos_token_id=1)


def test_default_is_colocated_vanilla_sync() -> None:
    r = compose_conf().trainer.rollout
    assert (r.engine, r.async_rollout, r.data_parallel, r.tensor_parallel) == ("vanilla", False, -1, -1)


@pytest.mark.parametrize(
    ("experiment", "dp", "tp", "hbm"),
    [("gemma4_e4b_omi2", 8, 2, 0.5), ("gpt_oss_20b_gsm8k", 2, 8, 0.8)],
)
def test_seed_presets_build_tunix_vllm_rollout_config(experiment: str, dp: int, tp: int, hbm: float) -> None:
    from rlexp.train.cluster import rollout_config, rollout_engine

    cfg = compose_conf([f"experiment={experiment}"])
    validate(cfg)  # vLLM on the preset's TPU slice is allowed
    assert cfg.trainer.rollout.async_rollout and cfg.slice.rollout_devices == dp * tp
    rc = rollout_config(cfg, TOKENIZER)
    assert type(rc).__module__ == "tunix.rl.rollout.base_rollout"
    assert (rc.data_parallel_size, rc.tensor_parallel_size, rc.rollout_vllm_hbm_utilization) == (dp, tp, hbm)
    assert rc.rollout_vllm_model_version == (cfg.model.path or cfg.model.hf_id) and rc.rollout_vllm_model_version
    assert rc.rollout_vllm_init_with_random_weights  # weights arrive with the first sync from the actor
    assert rollout_engine(cfg, colocated=False) == "vllm" == rollout_engine(cfg, colocated=True)


# The MaxText scripts' vLLM settings (run_gemma4_e4b_rl.sh, run_gptoss_20b_rl.sh + rl.yml), as Tunix fields.
SEED_VLLM = {
    "gemma4_e4b_omi2": dict(
        rollout_vllm_async_scheduling=True, rollout_vllm_enable_dp_attention=True, rollout_vllm_max_num_seqs=16,
        rollout_vllm_max_num_batched_tokens=2048, rollout_vllm_reshard_chunk_size=420, expert_parallel_size=1,
        kv_cache_size=512 + 3584 + 512,
    ),
    "gpt_oss_20b_gsm8k": dict(
        rollout_vllm_async_scheduling=True, rollout_vllm_enable_dp_attention=False, rollout_vllm_max_num_seqs=None,
        rollout_vllm_max_num_batched_tokens=None, rollout_vllm_reshard_chunk_size=None, expert_parallel_size=1,
        kv_cache_size=256 + 768 + 256, rollout_vllm_model_version="unsloth/gpt-oss-20b-BF16",
    ),
}  # fmt: skip


@pytest.mark.parametrize("experiment", sorted(SEED_VLLM))
def test_seed_vllm_settings_reach_tunix(experiment: str) -> None:
    from rlexp.train.cluster import rollout_config

    cfg = compose_conf([f"experiment={experiment}"])
    rc = rollout_config(cfg, TOKENIZER)
    assert {k: getattr(rc, k) for k in SEED_VLLM[experiment]} == SEED_VLLM[experiment]
    assert rc.rollout_vllm_kwargs == {}  # no experts split over the rollout devices
    assert cfg.trainer.rollout_micro_batch_size == 16


def test_rollout_env_is_set_before_the_engine_but_never_over_a_set_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlexp.train.cluster import apply_rollout_env

    monkeypatch.setenv("TPU_BACKEND_TYPE", "torchax")
    monkeypatch.delenv("RPA_D_BLOCK_SIZES", raising=False)
    cfg = compose_conf(["experiment=gemma4_e4b_omi2"])
    added = apply_rollout_env(cfg)
    assert "TPU_BACKEND_TYPE" not in added and __import__("os").environ["TPU_BACKEND_TYPE"] == "torchax"
    assert added["RPA_D_BLOCK_SIZES"] == __import__("os").environ["RPA_D_BLOCK_SIZES"] == "1,1024,1,512"
    for name in added:
        monkeypatch.delenv(name)


def test_vanilla_leaves_vllm_fields_at_tunix_defaults() -> None:
    from tunix.rl.rollout.base_rollout import RolloutConfig

    from rlexp.train.cluster import rollout_config, rollout_engine
    from rlexp.tunix.sampler import lean_rollout_engine

    cfg = compose_conf()
    rc, default = rollout_config(cfg, TOKENIZER), RolloutConfig()
    for field in ("rollout_vllm_model_version", "rollout_vllm_hbm_utilization", "data_parallel_size"):
        assert getattr(rc, field) == getattr(default, field)
    assert rollout_engine(cfg, colocated=False) == "vanilla"
    assert rollout_engine(cfg, colocated=True).__name__ == lean_rollout_engine().__name__ == "LeanRollout"
    # perf.patches=[]: Tunix's own rollout and Sampler, colocated or not
    assert rollout_engine(compose_conf(["perf.patches=[]"]), colocated=True) == "vanilla"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.rollout.engine=vllm"],
            "trainer.rollout.engine='vllm': vLLM rollout runs on TPU slices (vllm-tpu); use vanilla on cpu",
        ),
        (
            ["slice=h200", "trainer.rollout.engine=vllm"],
            "trainer.rollout.engine='vllm': vLLM rollout runs on TPU slices (vllm-tpu); use vanilla on gpu",
        ),
        (["trainer.rollout.engine=sglang"], "trainer.rollout.engine='sglang': use one of vanilla, vllm"),
        (["trainer.rollout.async_rollout=true"], "trainer.rollout.async_rollout=True: async rollout samples on"),
        (["trainer.rollout.hbm_utilization=1.5"], "trainer.rollout.hbm_utilization=1.5"),
        (["trainer.rollout.tensor_parallel=0"], "trainer.rollout.tensor_parallel=0"),
        (
            ["experiment=gemma4_e4b_omi2", "trainer.rollout.data_parallel=4"],
            "data_parallel x tensor_parallel x expert_parallel = 8 must equal the 16 rollout devices",
        ),
        (
            ["experiment=gemma4_e4b_omi2", "trainer.rollout.data_parallel=4", "trainer.rollout.expert_parallel=2"],
            "trainer.rollout.expert_parallel=2: must divide the model's experts (none); use 1",
        ),
        (
            ["experiment=qwen3_30b_a3b_omi2", "model.extra.num_experts=96"],
            "slice.mesh.fsdp=-1: the FSDP size 64 must divide the 96 experts",
        ),
        (["trainer.rollout.max_num_seqs=0"], "trainer.rollout.max_num_seqs=0: use a positive number, or null"),
        (["trainer.rollout.kv_cache_buffer=-1"], "trainer.rollout.kv_cache_buffer=-1: use tokens >= 0"),
        (["+trainer.rollout.env={A-B: x}"], "trainer.rollout.env.A-B='x': use an environment variable name"),
        (
            ["experiment=gpt_oss_20b_gsm8k", "trainer.rollout.tensor_parallel=-1", "trainer.rollout.data_parallel=3"],
            "must divide the 16",
        ),
    ],
)
def test_rollout_rules_refuse_in_one_line(overrides: list[str], message: str) -> None:
    from rlexp.checks import check_config  # the experts over FSDP are the family's rule

    with pytest.raises(ConfigError) as err:
        check_config(compose_conf(overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_async_rollout_is_explicit_on_separate_devices() -> None:
    from rlexp.train.cluster import set_async_rollout

    for async_rollout, separate, expected in [(True, True, True), (False, True, False), (True, False, False)]:
        cfg = compose_conf(
            ["slice=cpu-4", "slice.rollout_devices=2", f"trainer.rollout.async_rollout={str(async_rollout).lower()}"]
        )
        learner = SimpleNamespace(can_enable_async_rollout=separate)  # Tunix sets it from the two meshes
        set_async_rollout(cfg, learner)
        assert learner.can_enable_async_rollout is expected


def test_dequeue_time_is_kept() -> None:
    # Tunix 0.1.7 buffers "actor_dequeue_time" with no prefix, which its logger files under "global".
    assert map_name("global/train/actor_dequeue_time") == "perf/actor_dequeue_time_sec"


@pytest.mark.slow
def test_async_rollout_on_separate_cpu_devices_learns(tmp_path: Path) -> None:
    """The user's command: 2 trainer + 2 rollout fake CPU devices; with 2 micro-batches per step the second samples
    while the first trains. Training stays on-policy and must still learn."""
    cmd = [
        "slice=cpu-4",
        "slice.rollout_devices=2",
        "trainer.rollout.async_rollout=true",
        "trainer.micro_batch_size=4",
        "trainer.max_steps=100",
        "trainer.eval_every=50",
        "trainer.checkpoint_every=100",
        "trainer.eval_prompts=64",
        "logger=none",
        f"output_dir={tmp_path}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    proc = run_rlexp(*cmd, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 100
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    waits = [r["perf/actor_dequeue_time_sec"] for r in rows if "perf/actor_dequeue_time_sec" in r]
    assert len(waits) >= 90 and all(w >= 0 for w in waits)
    gain = summary["eval"]["after"]["pass_at_1"] - summary["eval"]["before"]["pass_at_1"]
    # measured: 0.180 -> 0.262 over 100 steps (64 prompts x 4 samples; sampling noise ~0.03)
    assert gain > 0.05, summary["eval"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        {"temperature": 1.0, "top_p": 1.0, "seed": 7, "max_prompt_length": 8},  # the training rollout's call
        {"temperature": 0.0, "max_prompt_length": 8},  # the greedy eval
        {"temperature": 0.7, "top_k": 5, "max_prompt_length": 4, "eos_tokens": [2, 5]},  # prompts longer than asked
        # trainer.correction's rollout: the sampled tokens' log-probabilities too (rlexp.algorithms.correction)
        {"temperature": 1.0, "top_p": 1.0, "seed": 7, "max_prompt_length": 8, "return_logprobs": True},
    ],
    ids=["sampled", "greedy", "longer_prompts_two_eos", "logprobs"],
)
def test_lean_sampler_returns_what_tunix_sampler_returns(options: dict) -> None:
    """Same model, prompts and keys through the lean sampler and Tunix's own: identical text, tokens and prompts."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, Mesh
    from tunix.generate import sampler as sampler_lib

    from rlexp.families.load import load_model
    from rlexp.models.loader import load_tokenizer
    from rlexp.train.cluster import rollout_config
    from rlexp.tunix.sampler import lean_rollout_engine

    conf = compose_conf()
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    model, tokenizer = load_model(conf.model, mesh), load_tokenizer(conf.model)
    lean = lean_rollout_engine()(model, tokenizer, mesh, rollout_config(conf, tokenizer, 8))._sampler
    tunix = sampler_lib.Sampler(model, tokenizer, lean.cache_config)
    prompts = ["1+2=", "13+4=", "29+29=", "1+2=", "7+8="] * 3
    call = dict(max_generation_steps=4, **options)
    ours, theirs = lean(input_strings=prompts, **call), tunix(input_strings=prompts, **call)
    assert ours.text == theirs.text and len(set(ours.text)) > 1
    assert [t.tolist() for t in ours.tokens] == [t.tolist() for t in theirs.tokens]
    assert [t.dtype for t in ours.tokens] == [t.dtype for t in theirs.tokens]
    np.testing.assert_array_equal(ours.padded_prompt_tokens, theirs.padded_prompt_tokens)
    assert ours.padded_prompt_tokens.dtype == theirs.padded_prompt_tokens.dtype
    assert (ours.logits, ours.logprobs) == (theirs.logits, theirs.logprobs)
    if options.get("return_logprobs"):
        assert [len(x) for x in ours.logprobs] == [len(t) for t in ours.tokens] and any(map(len, ours.logprobs))
