"""`python -m rlexp.export`: run dir -> Hugging Face folder that transformers loads with rlexp's logits."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from omegaconf import OmegaConf

from rlexp.config.schema import ModelConfig
from tests.helpers import compose_cfg
from tests.models.parity import max_rel_error, rlexp_logits


def make_run(run_dir: Path, model: ModelConfig | None, overrides: list[str], step: int, *, lora: bool = False):
    """A run dir as `python -m rlexp` leaves it: .hydra/config.yaml and an actor checkpoint of changed weights."""
    from tunix.sft.checkpoint_manager import CheckpointManager

    from rlexp.config.load import to_config
    from rlexp.families.load import load_model

    cfg = compose_cfg(overrides)
    if model is not None:
        cfg.model = OmegaConf.structured(model)
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    conf = to_config(cfg)
    actor = load_model(conf.model, None)
    if lora:
        from rlexp.models.lora import apply_lora

        actor = apply_lora(actor, conf.trainer.lora, None, seed=conf.seed)
    # stand-in for training: move every trained weight (LoRA: only the adapters)
    trained = nnx.LoRAParam if lora else nnx.Param
    state = nnx.state(actor, trained)
    # numpy's draws and sums: jax.random.normal and the sum compiled a program per weight shape, op by op
    rng = np.random.default_rng(7)

    def moved(x: jax.Array) -> jax.Array:
        return jnp.asarray((np.asarray(x, np.float32) + 0.05 * rng.standard_normal(x.shape)).astype(x.dtype))

    nnx.update(actor, jax.tree_util.tree_map(moved, state))
    manager = CheckpointManager(str(run_dir / "checkpoints" / "actor"))
    manager.save(step, actor, save_only_lora_params=lora, force=True)
    manager.close()  # saves are asynchronous
    return actor


def _check_round_trip(run_dir: Path, actor, out: Path, vocab: int, tokens_len: int = 7) -> float:
    from rlexp.export import main

    assert main([str(run_dir), "--out", str(out)]) == 0
    import torch  # here, not at the top: collecting the suite would import torch in every worker
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = np.random.default_rng(3).integers(3, vocab, size=(2, tokens_len))
    with torch.no_grad():
        theirs = hf(torch.as_tensor(tokens)).logits.numpy()
    return max_rel_error(rlexp_logits(actor, tokens), theirs)


@pytest.mark.slow
def test_tiny_qwen3_run_exports_to_transformers(tmp_path):
    actor = make_run(tmp_path / "run", None, ["model=tiny"], step=4)
    out = tmp_path / "hf"
    err = _check_round_trip(tmp_path / "run", actor, out, vocab=17)
    assert err <= 1e-4
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok("1+2=")["input_ids"]


@pytest.mark.slow
def test_lora_run_exports_merged_weights(tmp_path):
    actor = make_run(tmp_path / "run", None, ["model=tiny", "trainer.lora.rank=4"], step=2, lora=True)
    err = _check_round_trip(tmp_path / "run", actor, tmp_path / "hf", vocab=17)
    assert err <= 1e-4


@pytest.mark.slow
def test_bf16_lora_run_exports_merged_weights(tmp_path):
    """Adapters of a model.param_dtype=bfloat16 run are bf16, which numpy's einsum refused when merging."""
    overrides = ["model=tiny", "trainer.lora.rank=4", "model.dtype=bfloat16", "model.param_dtype=bfloat16"]
    actor = make_run(tmp_path / "run", None, overrides, step=2, lora=True)
    err = _check_round_trip(tmp_path / "run", actor, tmp_path / "hf", vocab=17)
    assert err <= 0.05  # bf16 weights and rlexp's bf16 compute against transformers' float32 compute


@pytest.mark.slow
def test_gpt_oss_and_gemma4_runs_export(tmp_path):
    from rlexp.families.hf_config import model_config_from_hf
    from tests.models.hf_reference import VOCAB, make_model, save_reference
    from tests.models.test_parity_gemma4 import tiny_gemma4_config
    from tests.models.test_parity_gpt_oss import tiny_gpt_oss_config

    for name, config in (("gpt_oss", tiny_gpt_oss_config()), ("gemma4", tiny_gemma4_config())):
        folder = save_reference(make_model(config), tmp_path / f"{name}_base")
        m = model_config_from_hf(json.loads((folder / "config.json").read_text()), name=name, path=str(folder))
        actor = make_run(tmp_path / name, m, [], step=1)
        err = _check_round_trip(tmp_path / name, actor, tmp_path / f"{name}_hf", vocab=VOCAB, tokens_len=9)
        assert err <= 1e-4, name


def test_export_without_checkpoint_is_one_line(tmp_path, capsys):
    from rlexp.export import main

    assert main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no checkpoints/actor/<step>" in capsys.readouterr().err


def test_large_exports_are_sharded_with_an_index(tmp_path):
    from rlexp.models.checkpoint import safetensors_files
    from rlexp.models.export import write_shards
    from rlexp.models.gpt_oss.params import read_safetensors

    tensors = {f"w{i}": np.full((256,), i, np.float32) for i in range(5)}  # 1 KiB each
    write_shards(tensors, tmp_path, {"format": "pt"}, max_bytes=2048)
    files = safetensors_files(str(tmp_path))
    assert [Path(f).name for f in files] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    back = {k: np.asarray(v) for f in files for k, v in read_safetensors(f)}
    assert sorted(back) == sorted(tensors) and all((back[k] == tensors[k]).all() for k in tensors)
    write_shards(tensors, tmp_path, {"format": "pt"})  # small again: one file, stale shards removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def _fake_download(folder: Path) -> dict[str, bytes]:
    """A downloaded model's folder (weights, config, tokenizer) as bytes by name."""
    folder.mkdir(parents=True)
    files = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\x00weights", "tokenizer.json": b"{}"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def test_output_dirs_are_claimed_only_when_empty_or_rlexps(tmp_path):
    from rlexp.errors import RlexpError
    from rlexp.storage import OUTPUT_MARKER, check_output_dir, claim_output_dir

    files = _fake_download(tmp_path / "model")
    with pytest.raises(RlexpError, match=r"--out=.*/model: a folder holding other files that rlexp did not write"):
        claim_output_dir(tmp_path / "model")
    assert {p.name: p.read_bytes() for p in (tmp_path / "model").iterdir()} == files
    assert claim_output_dir(tmp_path / "new" / "dir") == tmp_path / "new" / "dir"  # absent: made, marked
    assert (tmp_path / "new" / "dir" / OUTPUT_MARKER).is_file()
    (tmp_path / "new" / "dir" / "model.safetensors").write_bytes(b"an earlier output")
    assert check_output_dir(tmp_path / "new" / "dir", key="--out")  # marked: rlexp's again
    (tmp_path / "empty").mkdir()
    assert claim_output_dir(tmp_path / "empty", key="output")
    (tmp_path / "f").write_text("x")
    with pytest.raises(RlexpError, match="output=.*: a file is there"):
        check_output_dir(tmp_path / "f", key="output")


def test_export_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    """`rlexp export RUN --out <a downloaded model>` replaced its weights, config and tokenizer (exit 0); now one
    line, exit 2, and the folder byte for byte as it was (refused before any weight is loaded)."""
    from rlexp.export import main

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(compose_cfg(["model=tiny"])))
    (run / "checkpoints" / "actor" / "3").mkdir(parents=True)
    files = _fake_download(tmp_path / "model")
    assert main([str(run), "--out", str(tmp_path / "model")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{tmp_path / 'model'}: a folder holding other files" in err
    assert "give another --out, or delete the folder" in err
    assert {p.name: p.read_bytes() for p in (tmp_path / "model").iterdir()} == files
