"""Qwen3 (dense and MoE) and Llama 3 loaded by rlexp (Tunix modules) match transformers on random tiny checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.models.hf_reference import VOCAB, hf_greedy, hf_logits, make_model, prompt_tokens, save_reference
from tests.models.parity import max_rel_error, rlexp_greedy, rlexp_logits

TOL = 1e-4
GEN = 32


def _qwen3(theta: float, cls: str = "Qwen3Config", **over: object) -> object:
    import transformers  # here: collecting the suite would import it in every worker

    return getattr(transformers, cls)(
        **{
            "tie_word_embeddings": True,
            **over,
        },
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=theta,
        rms_norm_eps=1e-6,
        max_position_embeddings=128,
    )


def _llama(scaled: bool) -> object:
    scaling = (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
        if scaled
        else None
    )
    import transformers

    return transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=500000.0,
        rope_scaling=scaling,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        max_position_embeddings=128,
    )


# Qwen3-30B-A3B's layout, tiny: every layer routes to top-2 of 8 experts, renormalised (norm_topk_prob); no dense
# layer (mlp_only_layers=[], decoder_sparse_step=1), so intermediate_size goes unused
QWEN3_MOE = dict(moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                 tie_word_embeddings=False)  # fmt: skip


CASES = {
    "qwen3_moe": lambda: _qwen3(1_000_000.0, "Qwen3MoeConfig", **QWEN3_MOE),
    "qwen3": lambda: _qwen3(1_000_000.0),
    "qwen3_theta5e6": lambda: _qwen3(5_000_000.0),
    "llama3_1": lambda: _llama(True),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_and_greedy_match_transformers(case, tmp_path, record_property):
    from rlexp.families.hf_config import model_config_from_hf
    from rlexp.families.load import build_model

    ref = make_model(CASES[case]())
    folder = save_reference(ref, tmp_path / case)
    m = model_config_from_hf(json.loads((folder / "config.json").read_text()), name=case, path=str(folder))
    ours = build_model(m, str(folder))

    tokens = prompt_tokens()
    err = max_rel_error(rlexp_logits(ours, tokens), hf_logits(ref, tokens))
    record_property("max_rel_logit_error", err)
    print(f"{case}: max logit error / logit scale = {err:.2e}")
    assert err <= TOL
    np.testing.assert_array_equal(rlexp_greedy(ours, tokens, GEN, VOCAB), hf_greedy(ref, tokens, GEN))
