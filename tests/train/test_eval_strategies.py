"""trainer.eval_strategy: MaxText's values reach the rollout config of every engine, seeded, overridable."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlexp.config.validate import validate
from rlexp.errors import ConfigError
from rlexp.train.evaluate import eval_sampling, evaluate, strategy_rollout_config
from tests.helpers import compose_conf

TOKENIZER = SimpleNamespace(eos_token_id=1)


@pytest.mark.slow  # imports Tunix
@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("greedy", {"temperature": 0.01, "top_p": 1.0, "top_k": 1}),
        ("standard", {"temperature": 0.7, "top_p": 0.95, "top_k": 50}),
        ("liberal", {"temperature": 0.85, "top_p": 1.0, "top_k": 2000}),
    ],
)
def test_seed_presets_vllm_rollout_config_gets_maxtexts_strategy(strategy: str, expected: dict) -> None:
    from rlexp.train.cluster import rollout_config

    cfg = compose_conf(["experiment=gpt_oss_20b_gsm8k", f"trainer.eval_strategy={strategy}"])
    validate(cfg)
    base = rollout_config(cfg, TOKENIZER)
    assert base.rollout_vllm_model_version  # the vLLM engine's config
    configs = [strategy_rollout_config(cfg, base, p) for p in range(2)]
    # Tunix's VllmRollout.generate passes exactly these fields to vLLM's SamplingParams (seed included)
    for rc in configs:
        assert {k: getattr(rc, k) for k in expected} == expected
        assert rc.rollout_vllm_model_version == base.rollout_vllm_model_version
    assert configs[0].seed != configs[1].seed and all(isinstance(rc.seed, int) for rc in configs)
    assert (base.temperature, base.top_k) == (0.9, 50)  # the training sampler's own stay


def test_overrides_and_a_small_vocabulary() -> None:
    cfg = compose_conf(["trainer.eval_strategy=liberal", "trainer.eval_temperature=0.3"])
    assert eval_sampling(cfg) == {"temperature": 0.3, "top_p": 1.0, "top_k": cfg.model.vocab_size}  # 2000 > 17
    cfg = compose_conf(["trainer.eval_strategies.standard.top_k=5", "trainer.eval_strategy=standard"])
    assert eval_sampling(cfg)["top_k"] == 5


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.eval_strategy=beam", "trainer.eval_strategy"),
        ("trainer.eval_mode=best", "trainer.eval_mode"),
        ("trainer.eval_k=[1,5]", "trainer.eval_k"),  # eval_samples is 4
        ("trainer.eval_top_p=0", "trainer.eval_top_p"),
        ("trainer.eval_strategies.greedy.top_k=0", "trainer.eval_strategies.greedy.top_k"),
        ("trainer.eval_passes=0", "trainer.eval_passes"),
        ("dataset.shuffle=maxtext", "dataset.shuffle"),  # the synthetic default has no file to split
    ],
)
def test_bad_eval_keys_are_refused(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(compose_conf([override]))
    assert err.value.key == key


class FakeRollout:
    """Records the rollout configs; answers "2" to every prompt (a correct 1+1 completion, a wrong one else)."""

    def __init__(self) -> None:
        self.configs: list = []

    def generate(self, prompts: list[str], rollout_config) -> SimpleNamespace:  # noqa: ANN001
        self.configs.append(rollout_config)
        return SimpleNamespace(text=["2"] * len(prompts), tokens=[[5]] * len(prompts))


def test_evaluate_samples_each_pass_with_the_strategy_and_counts() -> None:
    from rlexp.train.cluster import rollout_config

    cfg = compose_conf(
        ["trainer.eval_passes=3", "trainer.eval_mode=maj", "trainer.eval_samples=2", "trainer.eval_k=[2]"]
    )
    rows = [{"id": "a", "prompt": "1+1=", "question": "1+1=", "answer": "2", "data_source": "arith"},
            {"id": "b", "prompt": "1+2=", "question": "1+2=", "answer": "3", "data_source": "arith"}]  # fmt: skip
    rollout = FakeRollout()
    out = evaluate(SimpleNamespace(rollout=rollout), rows, cfg, rollout_config(cfg, TOKENIZER))
    strategy, sampled = rollout.configs[:3], rollout.configs[3:]
    assert [(c.temperature, c.top_k, c.top_p) for c in strategy] == [(0.01, 1, 1.0)] * 3
    assert len({c.seed for c in strategy}) == 3
    assert all((c.temperature, c.top_k, c.top_p) == (1.0, None, 1.0) for c in sampled)
    assert (out["correct"], out["total"], out["accuracy"], out["pass_at_2"], out["maj_at_2"]) == (1, 2, 0.5, 0.5, 0.5)
    assert out["partial_accuracy"] == 0.5 and out["format_accuracy"] == 1.0  # "2" is a bare number


@pytest.mark.slow
def test_greedy_strategy_answers_alike_across_engines_and_seeds() -> None:
    """MaxText's greedy (0.01 / top-k 1 / top-p 1) on the default task: rlexp's lean sampler (the one every rlexp eval
    samples with on the vanilla engine), at two seeds, gives the answers of Tunix's own sampler decoding greedily."""
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
    prompts = ["1+2=", "13+4=", "29+29=", "7+8=", "20+5=", "3+9="]
    call = {"max_generation_steps": 4, "max_prompt_length": 8}
    reference = tunix(input_strings=prompts, temperature=0.0, **call).text  # Tunix's greedy mode
    assert len(set(reference)) > 1
    for seed in (3, 11):
        assert lean(input_strings=prompts, seed=seed, **eval_sampling(conf), **call).text == reference, seed
