"""Model options: real dimensions, base vs instruction-tuned hub ids, config.json mismatch and missing-shard errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.errors import ConfigError, RlexpError
from rlexp.estimates.model_terms import param_count
from rlexp.families.hf_config import check_hf_config, model_config_from_hf
from rlexp.families.rules import check_model_option, hub_id_instruction_tuned
from rlexp.models.checkpoint import safetensors_files
from tests.helpers import compose_conf, conf_options

# published parameter counts (billions; gemma4 counts only the text model with its per-layer embeddings)
EXPECTED_PARAMS = {
    "qwen3_0_6b": 0.596, "qwen3_1_7b": 1.721, "qwen3_4b": 4.022, "qwen3_8b": 8.191,
    "llama3_1_8b": 8.030, "gpt_oss_20b": 20.915, "gemma4_e4b": 7.52, "gemma4_e2b": 4.65,
    "qwen3_30b_a3b": 30.532, "gemma4_26b_a4b": 25.2,  # total; 3.3B / 3.8B active
}  # fmt: skip


def test_every_option_composes_validates_and_has_the_published_size():
    assert set(EXPECTED_PARAMS) <= set(conf_options("model"))
    for name, billions in EXPECTED_PARAMS.items():
        m = compose_conf([f"model={name}"]).model
        check_model_option(m)
        assert m.hf_id and not m.path
        assert param_count(m) / 1e9 == pytest.approx(billions, rel=2e-3), name


def test_base_vs_instruction_tuned_is_explicit():
    assert compose_conf(["model=gemma4_e4b"]).model.hf_id == "google/gemma-4-E4B"
    assert hub_id_instruction_tuned("google/gemma-4-E4B") is False
    assert hub_id_instruction_tuned("google/gemma-4-E4B-it") is True
    assert hub_id_instruction_tuned("Qwen/Qwen3-8B-Base") is False
    assert hub_id_instruction_tuned("Qwen/Qwen3-8B") is True
    assert hub_id_instruction_tuned("meta-llama/Llama-3.1-8B-Instruct") is True
    assert hub_id_instruction_tuned("someone/custom-model") is None
    m = compose_conf(["model=gemma4_e4b", "model.hf_id=google/gemma-4-E4B-it"]).model
    with pytest.raises(ConfigError, match="instruction-tuned checkpoint; set model.instruction_tuned=true"):
        check_model_option(m)
    check_model_option(compose_conf(["model=gemma4_e4b", "model.hf_id=google/gemma-4-E4B-it",
                                     "model.instruction_tuned=true"]).model)  # fmt: skip


def test_unknown_family_lists_the_known_ones():
    m = compose_conf(["model=qwen3_0_6b", "model.family=mistral"]).model
    with pytest.raises(ConfigError, match="use one of qwen3, llama3, gemma4, gpt_oss"):
        check_model_option(m)


def _hf_qwen3(**over: object) -> dict:
    hf = {"model_type": "qwen3", "num_hidden_layers": 28, "vocab_size": 151936, "hidden_size": 1024,
          "intermediate_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
          "rope_theta": 1000000, "tie_word_embeddings": True}  # fmt: skip
    return {**hf, **over}


def test_moe_config_json_is_checked_for_what_tunix_implements():
    """Qwen3-30B-A3B-Base's config.json (the hub spells num_experts); Tunix routes every layer, renormalised."""
    m = compose_conf(["model=qwen3_30b_a3b"]).model
    hub = _hf_qwen3(model_type="qwen3_moe", num_hidden_layers=48, hidden_size=2048, intermediate_size=6144,
                    moe_intermediate_size=768, num_attention_heads=32, num_key_value_heads=4, num_experts=128,
                    num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                    tie_word_embeddings=False)  # fmt: skip
    check_hf_config(m, hub, "/ckpt")
    with pytest.raises(RlexpError) as err:
        check_hf_config(m, {**hub, "norm_topk_prob": False, "num_experts": 64, "mlp_only_layers": [3]}, "/ckpt")
    msg = str(err.value)
    assert "norm_topk_prob=False (rlexp's qwen3 MoE needs True)" in msg and "mlp_only_layers=[3]" in msg
    assert "model.extra.num_experts=128 vs num_local_experts=64" in msg and "\n" not in msg
    dense = compose_conf(["model=qwen3_0_6b"]).model
    check_hf_config(dense, _hf_qwen3(norm_topk_prob=False), "/ckpt")  # a dense option ignores MoE keys


def test_config_json_mismatch_names_every_field():
    m = compose_conf(["model=qwen3_0_6b"]).model
    check_hf_config(m, _hf_qwen3(), "/ckpt")
    with pytest.raises(RlexpError) as err:
        check_hf_config(m, _hf_qwen3(num_hidden_layers=36, num_attention_heads=32, vocab_size=1000), "/ckpt")
    msg = str(err.value)
    assert "model.num_layers=28 vs num_hidden_layers=36" in msg
    assert "model.num_heads=16 vs num_attention_heads=32" in msg
    assert "model.vocab_size=151936 vs vocab_size=1000" in msg
    assert "\n" not in msg
    with pytest.raises(RlexpError, match="model_type='llama' is not a qwen3 checkpoint"):
        check_hf_config(m, _hf_qwen3(model_type="llama"), "/ckpt")


def test_multimodal_gemma4_config_is_read_from_text_config():
    m = compose_conf(["model=gemma4_e4b"]).model
    text = {"model_type": "gemma4_text", "num_hidden_layers": 42, "vocab_size": 262144, "hidden_size": 2560,
            "intermediate_size": 10240, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
            "global_head_dim": 512, "hidden_size_per_layer_input": 256, "num_kv_shared_layers": 18,
            "sliding_window": 512}  # fmt: skip
    check_hf_config(m, {"model_type": "gemma4", "text_config": text}, "/ckpt")
    with pytest.raises(RlexpError, match="model.extra.num_kv_shared_layers=18 vs num_kv_shared_layers=20"):
        check_hf_config(m, {"model_type": "gemma4", "text_config": {**text, "num_kv_shared_layers": 20}}, "/ckpt")


def test_model_config_from_hf_round_trips_an_option():
    m = model_config_from_hf(_hf_qwen3(max_position_embeddings=40960, rms_norm_eps=1e-6), name="x")
    ref = compose_conf(["model=qwen3_0_6b"]).model
    for key in ("family", "num_layers", "vocab_size", "embed_dim", "hidden_dim", "num_heads", "num_kv_heads",
                "head_dim", "max_context"):  # fmt: skip
        assert getattr(m, key) == getattr(ref, key), key


def _safetensors() -> bytes:
    """A complete safetensors file holding one small tensor (the shard checks read file headers)."""
    import numpy as np
    from safetensors.numpy import save

    return save({"t": np.zeros(2, np.float32)})


_SAFETENSORS = _safetensors()


def _index(folder: Path, shards: list[str], present: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    weight_map = {f"t{i}": s for i, s in enumerate(shards)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    for s in present:
        (folder / s).write_bytes(_SAFETENSORS)


def test_missing_shard_is_named(tmp_path):
    shards = [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ]
    _index(tmp_path / "ok", shards, shards)
    assert [Path(p).name for p in safetensors_files(str(tmp_path / "ok"))] == shards
    _index(tmp_path / "bad", shards, [shards[0], shards[2]])
    with pytest.raises(RlexpError, match=r"missing safetensors shard\(s\) model-00002-of-00003.safetensors .*2 of 3"):
        safetensors_files(str(tmp_path / "bad"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RlexpError, match="no \\*.safetensors files"):
        safetensors_files(str(tmp_path / "empty"))
    with pytest.raises(RlexpError, match="does not exist"):
        safetensors_files(str(tmp_path / "nowhere"))


def test_hub_download_offline_is_one_actionable_line(monkeypatch, tmp_path):
    from rlexp.models.hub import download

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(RlexpError) as err:
        download("google/gemma-4-E4B", cache_dir=str(tmp_path))
    assert "cannot download" in str(err.value) and "model.path=" in str(err.value)


@pytest.mark.parametrize("family", ["gpt_oss", "gemma4"])
def test_tiny_random_checkpoint_matches_its_option(family, tmp_path):
    import torch  # noqa: F401 - the reference implementations need it

    from rlexp.families.hf_config import read_hf_config
    from rlexp.models.tiny_random import write

    folder = write(family, tmp_path / family)
    m = compose_conf([f"model={family}_tiny", f"model.path={folder}"]).model
    check_model_option(m)
    check_hf_config(m, read_hf_config(str(folder)), str(folder))
    assert (folder / "tokenizer.json").is_file()


def test_hub_download_gated_or_missing_says_what_to_do(monkeypatch):
    import httpx
    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    from rlexp.models import hub

    seen = {}

    def fake(repo_id, **kw):
        seen.update(kw, repo_id=repo_id)
        response = httpx.Response(401 if "gated" in repo_id else 404, request=httpx.Request("GET", "https://hf.co"))
        err = hub_errors.GatedRepoError if "gated" in repo_id else hub_errors.RepositoryNotFoundError
        raise err("denied", response=response)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    with pytest.raises(RlexpError) as err:
        hub.download("org/gated-model")
    assert "accept its license" in str(err.value) and "hf_secret_value" not in str(err.value)
    assert seen["token"] == "hf_secret_value"  # passed in memory only
    assert "*.safetensors" in seen["allow_patterns"] and "config.json" in seen["allow_patterns"]
    assert not any(p.endswith((".bin", ".pth", ".gguf")) for p in seen["allow_patterns"])
    with pytest.raises(RlexpError, match="no such repository"):
        hub.download("org/missing")


def test_remote_folder_is_copied_once_and_checked(tmp_path):
    import fsspec

    from rlexp.models.checkpoint import local_copy

    fs = fsspec.filesystem("memory")
    fs.pipe("/bucket/ckpt/config.json", b'{"model_type": "qwen3"}')
    fs.pipe("/bucket/ckpt/model.safetensors", _SAFETENSORS)
    fs.pipe("/bucket/ckpt/tokenizer.json", b"{}")
    fs.pipe("/bucket/ckpt/optimizer.pt", b"not needed")
    local = Path(local_copy("memory://bucket/ckpt", cache_root=str(tmp_path)))
    assert sorted(p.name for p in local.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    kept = _SAFETENSORS[:-4] + b"kept"  # same size and a readable header: not fetched again
    (local / "model.safetensors").write_bytes(kept)
    assert Path(local_copy("memory://bucket/ckpt", cache_root=str(tmp_path))) == local
    assert (local / "model.safetensors").read_bytes() == kept
    fs.pipe("/bucket/bad/model.safetensors.index.json", b'{"weight_map": {"a": "model-00001-of-00002.safetensors"}}')
    with pytest.raises(RlexpError, match="model-00001-of-00002.safetensors"):
        local_copy("memory://bucket/bad", cache_root=str(tmp_path))


def test_rope_scaling_mismatch_is_named():
    m = compose_conf(["model=gpt_oss_20b"]).model
    hf = {"model_type": "gpt_oss", "num_hidden_layers": 24, "vocab_size": 201088, "hidden_size": 2880,
          "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
          "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128, "rope_theta": 150000,
          "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                           "truncate": False, "original_max_position_embeddings": 4096}}  # fmt: skip
    check_hf_config(m, hf, "/ckpt")
    hf["rope_scaling"] = {**hf["rope_scaling"], "factor": 8.0}
    with pytest.raises(RlexpError, match=r"model.extra.rope_scaling.factor=32.0 vs rope_scaling.factor=8.0"):
        check_hf_config(m, hf, "/ckpt")
    new_layout = {k: v for k, v in hf.items() if k not in ("rope_theta", "rope_scaling")}
    new_layout["rope_parameters"] = {**hf["rope_scaling"], "factor": 32.0, "rope_theta": 10000.0}
    with pytest.raises(RlexpError, match=r"rope_theta=150000 vs rope_parameters.rope_theta=10000.0"):
        check_hf_config(m, new_layout, "/ckpt")
