"""Gemma 4 loaded by rlexp (Tunix's gemma4) matches Hugging Face transformers: per-layer embeddings, KV sharing,
sliding/global layers with proportional RoPE, logit soft-cap, and 26B-A4B's experts and key-equals-value layers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.models.hf_reference import VOCAB, hf_greedy, hf_logits, make_model, prompt_tokens, save_reference
from tests.models.parity import max_rel_error, rlexp_greedy, rlexp_logits

TOL = 1e-4
GEN = 32


# 26B-A4B's layout, tiny: no per-layer embeddings or KV sharing; every layer adds top-2 of 8 experts to its dense
# MLP; global layers use their keys as values over 1 KV head (attention_k_eq_v)
MOE = dict(intermediate_size=48, num_global_key_value_heads=1, attention_k_eq_v=True, hidden_size_per_layer_input=0,
           num_kv_shared_layers=0, enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=16)  # fmt: skip


def tiny_gemma4_config(double_wide: bool = False, moe: bool = False) -> object:
    # 6 layers, period 3 (two sliding, one global); last 3 layers reuse layers 1 (local) and 2 (global)
    import transformers  # here: collecting the suite would import it in every worker

    return transformers.Gemma4TextConfig(
        **{
            "vocab_size": VOCAB,
            "vocab_size_per_layer_input": VOCAB,
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 6,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "global_head_dim": 32,
            "hidden_size_per_layer_input": 8,
            "num_kv_shared_layers": 3,
            "use_double_wide_mlp": double_wide,
            "sliding_window": 4,  # shorter than the prompt, so the window matters
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2,
            "final_logit_softcapping": 30.0,
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 128,
            "tie_word_embeddings": True,
            "pad_token_id": 0,
            "bos_token_id": 2,
            "eos_token_id": 1,
            **(MOE if moe else {}),
        }
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("double_wide", "moe", "gen"),
    # e2b_like: generation differs from e4b_like only in the MLP width the logits already cover (saves ~25 s);
    # moe: 8 greedy tokens check each step's routing (ragged_dot costs ~6 s a token here)
    [(False, False, GEN), (True, False, 0), (False, True, 8)],
    ids=["e4b_like", "e2b_like", "moe_26b_like"],
)
def test_gemma4_logits_and_greedy_match_transformers(double_wide, moe, gen, tmp_path, record_property):
    from rlexp.families.hf_config import model_config_from_hf
    from rlexp.families.load import build_model

    ref = make_model(tiny_gemma4_config(double_wide, moe))
    folder = save_reference(ref, tmp_path / "gemma4")
    m = model_config_from_hf(json.loads((folder / "config.json").read_text()), name="gemma4_tiny", path=str(folder))
    if moe:  # 0.70 of the logit scale without rlexp.fixes.tunix_gemma4_moe (Tunix routes from the normed input)
        assert (m.extra["num_experts"], m.extra["expert_dim"], m.extra["num_global_kv_heads"]) == (8, 16, 1)
    else:
        assert m.extra["num_kv_shared_layers"] == 3 and m.extra["per_layer_input_dim"] == 8
    ours = build_model(m, str(folder))

    tokens = prompt_tokens(length=9)
    err = max_rel_error(rlexp_logits(ours, tokens), hf_logits(ref, tokens))
    record_property("max_rel_logit_error", err)
    print(f"gemma4 double_wide={double_wide} moe={moe}: max logit error / logit scale = {err:.2e}")
    assert err <= TOL
    if gen:
        np.testing.assert_array_equal(rlexp_greedy(ours, tokens, gen, VOCAB), hf_greedy(ref, tokens, gen))
