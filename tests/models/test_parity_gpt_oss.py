"""gpt-oss written in nnx matches Hugging Face transformers' GptOssForCausalLM (MoE, sinks, sliding window, YaRN),
from bf16-layout and from MXFP4 checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.models.hf_reference import VOCAB, hf_greedy, hf_logits, make_model, prompt_tokens, save_reference
from tests.models.parity import max_rel_error, rlexp_greedy, rlexp_logits

TOL = 1e-4
GEN = 32


def tiny_gpt_oss_config() -> object:
    import transformers  # here: collecting the suite would import it in every worker

    return transformers.GptOssConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=8,
        num_experts_per_tok=2,
        sliding_window=4,  # shorter than the prompt, so the window matters
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 64},
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        pad_token_id=0,
    )  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    ref = make_model(tiny_gpt_oss_config(), std=0.15)
    return ref, save_reference(ref, tmp_path_factory.mktemp("gpt_oss"))


@pytest.mark.slow
def test_gpt_oss_logits_and_greedy_match_transformers(reference, record_property):
    from rlexp.families.hf_config import model_config_from_hf
    from rlexp.families.load import build_model

    ref, folder = reference
    m = model_config_from_hf(json.loads((folder / "config.json").read_text()), name="gpt_oss_tiny", path=str(folder))
    ours = build_model(m, str(folder))
    tokens = prompt_tokens(length=9)
    err = max_rel_error(rlexp_logits(ours, tokens), hf_logits(ref, tokens))
    record_property("max_rel_logit_error", err)
    print(f"gpt_oss: max logit error / logit scale = {err:.2e}")
    assert err <= TOL
    np.testing.assert_array_equal(rlexp_greedy(ours, tokens, GEN, VOCAB), hf_greedy(ref, tokens, GEN))


@pytest.mark.slow
def test_mxfp4_checkpoint_loads_like_its_dequantised_weights(reference, tmp_path, record_property):
    """Experts stored as MXFP4 blocks/scales (as openai/gpt-oss-20b publishes them) give the reference's logits."""
    import torch
    from safetensors.torch import load_file, save_file

    from rlexp.families.hf_config import model_config_from_hf
    from rlexp.families.load import build_model
    from rlexp.models.gpt_oss.mxfp4 import dequantize, quantize

    ref, folder = reference
    tensors = load_file(str(folder / "model.safetensors"))
    grid_ref = make_model(tiny_gpt_oss_config(), std=0.15)
    grid_ref.load_state_dict({k: v for k, v in tensors.items()}, strict=False)
    quantised = {}
    for name, value in tensors.items():
        if name.endswith(("gate_up_proj", "down_proj")) and ".experts." in name:
            # [E, in, out] -> [E, out, in]: MXFP4 blocks run along the input dimension
            blocks, scales = quantize(value.numpy().transpose(0, 2, 1))
            quantised[f"{name}_blocks"] = torch.from_numpy(np.ascontiguousarray(blocks))
            quantised[f"{name}_scales"] = torch.from_numpy(np.ascontiguousarray(scales))
            on_grid = torch.from_numpy(dequantize(blocks, scales).transpose(0, 2, 1).copy())
            # FP4 keeps ~1 significant bit: the grid weights are a coarse but faithful copy
            assert torch.linalg.norm(on_grid - value) < 0.3 * torch.linalg.norm(value)
            grid_ref.get_parameter(name).data.copy_(on_grid)
        else:
            quantised[name] = value
    out = tmp_path / "mxfp4"
    out.mkdir()
    save_file(quantised, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text((folder / "config.json").read_text())

    m = model_config_from_hf(json.loads((out / "config.json").read_text()), name="gpt_oss_mxfp4", path=str(out))
    ours = build_model(m, str(out))
    tokens = prompt_tokens(length=9)
    err = max_rel_error(rlexp_logits(ours, tokens), hf_logits(grid_ref, tokens))
    record_property("max_rel_logit_error", err)
    assert err <= TOL
