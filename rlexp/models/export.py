"""A run's actor checkpoint as a Hugging Face model folder (what `python -m rlexp.export` writes).

Loads the run's base model (its `.hydra/config.yaml` names it), restores the actor checkpoint
(merging LoRA adapters when the run trained some), converts the weights back to the Hugging Face
names and layouts of the family, and writes model.safetensors with the base checkpoint's
config.json and tokenizer files. Tensors of the base checkpoint that rlexp does not train (a vision
tower, say) are copied unchanged, so `transformers` loads the folder like the original.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.config.schema import ModelConfig, RlexpConfig
from rlexp.errors import RlexpError, RunError
from rlexp.models.hub import CONFIG_AND_TOKENIZER_FILES

SHARD = 5 * 2**30  # bytes per safetensors file, as the hub writes them


def find_checkpoint(target: Path) -> tuple[Path, Path, int]:
    """(run dir, actor checkpoint root, step) for a run dir or one `checkpoints/actor/<step>` folder."""
    if target.name.isdigit() and target.parent.name == "actor":
        root, step = target.parent, int(target.name)
        if not target.is_dir():
            saved = _steps(root)
            have = f"saved steps: {', '.join(map(str, saved))}" if saved else "the run saved no checkpoint"
            raise RlexpError(f"checkpoint={target}: no such step; {have}")
        return root.parent.parent, root, step
    if not target.is_dir():
        raise RlexpError(f"checkpoint={target}: no such run dir; give a run dir or <run dir>/checkpoints/actor/<step>")
    root = target / "checkpoints" / "actor"
    steps = _steps(root)
    if not steps:
        raise RlexpError(f"checkpoint={target}: no checkpoints/actor/<step> folder; pass a run dir that saved one")
    return target, root, steps[-1]


def _steps(root: Path) -> list[int]:
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and p.is_dir()) if root.is_dir() else []


def run_config(run_dir: Path) -> RlexpConfig:
    from omegaconf import OmegaConf

    from rlexp.config.load import to_config

    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        raise RlexpError(f"{run_dir}: no .hydra/config.yaml; pass the run dir that `python -m rlexp` wrote")
    try:
        raw = OmegaConf.load(path)
        raw.pop("hydra", None)
        return to_config(OmegaConf.merge(OmegaConf.structured(RlexpConfig), raw))
    except RlexpError:
        raise
    except Exception as err:  # noqa: BLE001 - YAML or OmegaConf: the recorded config is unusable
        raise RunError(
            f"{path}: not the config of an rlexp run ({str(err).splitlines()[0][:200]}); restore it from a copy"
        ) from None


def check_out(out: str) -> Path:
    """The folder to write into: new, empty, or an earlier rlexp output (its marker); never a file or another's folder."""
    from rlexp.storage import check_output_dir

    return check_output_dir(out)


def flat_params(model: Any) -> dict[str, np.ndarray]:
    """{"layers.0.attn.q_proj.w": array, ...}: a model's nnx parameters by dotted path."""
    import jax
    from flax import nnx

    leaves = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model, nnx.Param)))[0]
    return {".".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path): np.asarray(v) for path, v in leaves}


def hf_tensors(m: ModelConfig, params: dict[str, np.ndarray], prefix: str = "model.") -> dict[str, np.ndarray]:
    """Hugging Face tensors of a family's nnx parameters (the inverse of its loader's mapping)."""
    out: dict[str, np.ndarray] = {}
    for key, v in params.items():
        name = _hf_name(m, key, v, prefix)
        if name is None:
            continue
        for hf_key, value in name:
            out[hf_key] = np.ascontiguousarray(value)
    return out


def _hf_name(m: ModelConfig, key: str, v: np.ndarray, prefix: str) -> list[tuple[str, np.ndarray]] | None:
    d = m.embed_dim
    top = {
        "embedder.input_embedding": f"{prefix}embed_tokens.weight",
        "final_norm.w": f"{prefix}norm.weight",
        "final_norm.scale": f"{prefix}norm.weight",
    }
    if key in top:
        return [(top[key], v)]
    if key in ("lm_head.w", "lm_head"):
        return [("lm_head.weight", v.T)]
    if m.family == "gemma4":
        return _gemma4_name(m, key, v, prefix)
    match = re.fullmatch(r"layers\.(\d+)\.(.+)", key)
    if not match:
        return None
    i, rest = match.groups()
    p = f"{prefix}layers.{i}."
    if m.family == "gpt_oss":
        table = {
            "attn.q_proj": ("self_attn.q_proj.weight", lambda x: x.reshape(d, -1).T),
            "attn.k_proj": ("self_attn.k_proj.weight", lambda x: x.reshape(d, -1).T),
            "attn.v_proj": ("self_attn.v_proj.weight", lambda x: x.reshape(d, -1).T),
            "attn.o_proj": ("self_attn.o_proj.weight", lambda x: x.reshape(-1, d).T),
            "attn.q_bias": ("self_attn.q_proj.bias", lambda x: x.reshape(-1)),
            "attn.k_bias": ("self_attn.k_proj.bias", lambda x: x.reshape(-1)),
            "attn.v_bias": ("self_attn.v_proj.bias", lambda x: x.reshape(-1)),
            "attn.o_bias": ("self_attn.o_proj.bias", lambda x: x),
            "attn.sinks": ("self_attn.sinks", lambda x: x),
            "mlp.router_w": ("mlp.router.weight", lambda x: x.T),
            "mlp.router_b": ("mlp.router.bias", lambda x: x),
            "mlp.gate_up_proj": ("mlp.experts.gate_up_proj", lambda x: x),
            "mlp.gate_up_bias": ("mlp.experts.gate_up_proj_bias", lambda x: x),
            "mlp.down_proj": ("mlp.experts.down_proj", lambda x: x),
            "mlp.down_bias": ("mlp.experts.down_proj_bias", lambda x: x),
            "input_layernorm.w": ("input_layernorm.weight", lambda x: x),
            "post_attention_layernorm.w": ("post_attention_layernorm.weight", lambda x: x),
        }
    else:  # qwen3, llama3 (Tunix layouts)
        table = {
            "attn.q_proj.w": ("self_attn.q_proj.weight", lambda x: x.reshape(d, -1).T),
            "attn.k_proj.w": ("self_attn.k_proj.weight", lambda x: x.reshape(d, -1).T),
            "attn.v_proj.w": ("self_attn.v_proj.weight", lambda x: x.reshape(d, -1).T),
            "attn.o_proj.w": ("self_attn.o_proj.weight", lambda x: x.reshape(-1, d).T),
            "attn.q_norm.w": ("self_attn.q_norm.weight", lambda x: x),
            "attn.k_norm.w": ("self_attn.k_norm.weight", lambda x: x),
            "mlp.gate_proj.kernel": ("mlp.gate_proj.weight", lambda x: x.T),
            "mlp.up_proj.kernel": ("mlp.up_proj.weight", lambda x: x.T),
            "mlp.down_proj.kernel": ("mlp.down_proj.weight", lambda x: x.T),
            "input_layernorm.w": ("input_layernorm.weight", lambda x: x),
            "post_attention_layernorm.w": ("post_attention_layernorm.weight", lambda x: x),
        }
    if rest not in table:
        raise RlexpError(f"export of {m.family} does not know parameter {key}")
    name, fn = table[rest]
    return [(p + name, fn(v))]


def _gemma4_name(m: ModelConfig, key: str, v: np.ndarray, prefix: str) -> list[tuple[str, np.ndarray]] | None:
    d, layers = m.embed_dim, m.num_layers
    emb = {
        "embedder.per_layer_input_embedding": ("embed_tokens_per_layer.weight", lambda x: x.reshape(x.shape[0], -1)),
        "embedder.per_layer_model_projection.w": ("per_layer_model_projection.weight", lambda x: x.reshape(d, -1).T),
        "embedder.per_layer_projection_norm.scale": ("per_layer_projection_norm.weight", lambda x: x),
    }
    if key in emb:
        name, fn = emb[key]
        return [(prefix + name, fn(v))]
    match = re.fullmatch(r"layers\.(\d+)\.(.+)", key)
    if not match:
        return None
    i, rest = match.groups()
    p = f"{prefix}layers.{i}."
    shared = int(i) >= layers - int(m.extra.get("num_kv_shared_layers", 0))
    if rest == "attn.kv_einsum.w":  # [2, K, D, H] -> k_proj, v_proj [K*H, D]; shared layers have none
        if shared:
            return []
        return [(p + f"self_attn.{n}_proj.weight", v[j].transpose(0, 2, 1).reshape(-1, d)) for j, n in enumerate("kv")]
    if rest == "attn._key_norm.scale":
        return [] if shared else [(p + "self_attn.k_norm.weight", v)]
    table = {
        "attn.q_einsum.w": ("self_attn.q_proj.weight", lambda x: x.transpose(0, 2, 1).reshape(-1, d)),
        "attn.attn_vec_einsum.w": ("self_attn.o_proj.weight", lambda x: x.reshape(-1, d).T),
        "attn._query_norm.scale": ("self_attn.q_norm.weight", lambda x: x),
        "mlp.gate_proj.kernel": ("mlp.gate_proj.weight", lambda x: x.T),
        "mlp.up_proj.kernel": ("mlp.up_proj.weight", lambda x: x.T),
        "mlp.down_proj.kernel": ("mlp.down_proj.weight", lambda x: x.T),
        "pre_attention_norm.scale": ("input_layernorm.weight", lambda x: x),
        "post_attention_norm.scale": ("post_attention_layernorm.weight", lambda x: x),
        "pre_ffw_norm.scale": ("pre_feedforward_layernorm.weight", lambda x: x),
        "post_ffw_norm.scale": ("post_feedforward_layernorm.weight", lambda x: x),
        "skip_scale": ("layer_scalar", lambda x: x),
        "per_layer_input_gate.w": ("per_layer_input_gate.weight", lambda x: x.T),
        "per_layer_projection.w": ("per_layer_projection.weight", lambda x: x.T),
        "post_per_layer_input_norm.scale": ("post_per_layer_input_norm.weight", lambda x: x),
    }
    if rest not in table:
        raise RlexpError(f"export of gemma4 does not know parameter {key}")
    name, fn = table[rest]
    return [(p + name, fn(v))]


def _source_tensors(folder: Path) -> dict[str, Any]:
    """Names (and lazy readers) of the base checkpoint's tensors."""
    from rlexp.models.checkpoint import safetensors_files
    from rlexp.models.gpt_oss.params import read_safetensors

    out = {}
    for path in safetensors_files(str(folder)):
        for name, value in read_safetensors(path):
            out[name] = value
    return out


def export(
    target: str,
    out: str,
    *,
    adapter: bool = False,
    sampling: Callable[[RlexpConfig], dict[str, Any]] | None = None,
    command: str = "rlexp export",
) -> Path:
    """Write the Hugging Face folder for a run's latest (or the given) actor checkpoint; returns it.

    `adapter`: a LoRA run's adapters as a PEFT folder instead of merged weights (rlexp.models.export_peft).
    `sampling`: the eval's sampling of a config (the entry point passes rlexp.train.evaluate.eval_sampling) for
    generation_config.json; `command`: what the model card says wrote the folder."""
    from rlexp.models import export_extras
    from rlexp.models.loader import load_model, load_tokenizer, resolve_model_dir
    from rlexp.storage import claim_output_dir

    run_dir, ckpt_root, step = find_checkpoint(Path(target).expanduser())
    cfg = run_config(run_dir)
    check_out(out)  # before any weight is loaded
    m, lora = cfg.model, cfg.trainer.lora
    if adapter and lora.rank <= 0:
        raise RlexpError("--adapter: the run trained no LoRA adapters (trainer.lora.rank=0); export without --adapter")
    base_dir = resolve_model_dir(m)
    if Path(out).expanduser().resolve() == Path(base_dir).resolve():
        raise RlexpError(f"--out {out} is the base checkpoint's folder; export into a new folder")
    model = load_model(m, None)
    if lora.rank > 0:
        from rlexp.models.lora import apply_lora

        model = apply_lora(model, lora, None, seed=cfg.seed)
    restore_actor(model, ckpt_root, step, lora_only=lora.rank > 0)
    source = _source_tensors(base_dir)
    prefix = "model.language_model." if any(k.startswith("model.language_model.") for k in source) else "model."
    if adapter:
        from rlexp.models.export_peft import adapter_tensors, write_adapter
        from rlexp.models.lora import _lora_einsums

        to_hf = lambda params: hf_tensors(m, params, prefix)  # noqa: E731 - the family's names, this prefix
        tensors = adapter_tensors(m, flat_params(model), _lora_einsums(model), to_hf)
        dest = claim_output_dir(out, note=f"written by: {command}\n")
        _drop_other_export(dest, adapter=True)
        write_adapter(dest, cfg, tensors, m.hf_id or str(base_dir), step)
        files = [n for n in CONFIG_AND_TOKENIZER_FILES if n != "config.json"]  # a config.json reads as a full model
    else:
        tensors = _merged_tensors(m, model, lora, source, prefix)
        dest = claim_output_dir(out, note=f"written by: {command}\n")
        _drop_other_export(dest, adapter=False)
        write_shards(tensors, dest, {"format": "pt", "rlexp_step": str(step)})
        files = list(CONFIG_AND_TOKENIZER_FILES)
    for name in files:
        (dest / name).unlink(missing_ok=True)  # an earlier export's, which this base may not have
        if (base_dir / name).is_file():
            shutil.copy(base_dir / name, dest / name)
    if not adapter:
        config = json.loads((dest / "config.json").read_text())
        config.pop("quantization_config", None)  # weights are written dequantised
        (dest / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer = load_tokenizer(m)
    chosen = sampling(cfg) if sampling is not None else {"temperature": 0.0, "top_p": 1.0, "top_k": 1}
    export_extras.finish_folder(dest, cfg, tokenizer, chosen)
    card = export_extras.model_card(cfg, run_dir, step, command, adapter=adapter, sampling=chosen)
    (dest / "README.md").write_text(card)
    return dest


def _merged_tensors(m: ModelConfig, model: Any, lora: Any, source: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The Hugging Face tensors of the restored model, adapters merged, with the base's untrained tensors."""
    if lora.rank > 0:
        from rlexp.models.lora import merged_state

        params = merged_state(model, lora.alpha, lora.rank)
    else:
        params = flat_params(model)
    tensors = hf_tensors(m, params, prefix)
    if m.family == "gpt_oss":  # MXFP4 experts are written back dequantised
        source = {k: v for k, v in source.items() if not k.endswith(("_blocks", "_scales"))}
    dtype = {"float32": np.float32, "bfloat16": None, "float16": np.float16}[m.param_dtype]
    for name, value in source.items():
        if name not in tensors and not (name == "lm_head.weight" and m.extra.get("tie_word_embeddings")):
            tensors[name] = np.ascontiguousarray(value)
    if dtype is not None:
        tensors = {k: (v.astype(dtype) if v.dtype.kind == "f" else v) for k, v in tensors.items()}
    return tensors


def _drop_other_export(dest: Path, *, adapter: bool) -> None:
    """An earlier export of the other kind into this (rlexp's) folder: its weights go, so one kind remains."""
    from rlexp.models.export_peft import ADAPTER_FILES

    stale = [dest / "config.json", *dest.glob("model*.safetensors*")] if adapter else [dest / n for n in ADAPTER_FILES]
    for path in stale:
        path.unlink(missing_ok=True)


def write_shards(tensors: dict[str, np.ndarray], dest: Path, metadata: dict[str, str], max_bytes: int = SHARD) -> None:
    """model.safetensors, or model-0000i-of-0000n.safetensors + index.json above `max_bytes` (the hub's layout)."""
    from safetensors.numpy import save_file

    for old in dest.glob("model*.safetensors*"):
        old.unlink()
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name in sorted(tensors):
        nbytes = tensors[name].nbytes
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensors[name]
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], str(dest / "model.safetensors"), metadata=metadata)
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(dest / fname), metadata=metadata)
        weight_map.update(dict.fromkeys(shard, fname))
    index = {"metadata": {"total_size": sum(v.nbytes for v in tensors.values())}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def restore_actor(model: Any, root: Path, step: int, *, lora_only: bool) -> None:
    from tunix.sft.checkpoint_manager import CheckpointManager

    from rlexp.compat.orbax import drop_failed_read_leftovers

    drop_failed_read_leftovers()  # a damaged file's read leftovers would bury the one-line error
    try:
        restored, _ = CheckpointManager(str(root.resolve())).maybe_restore(
            model, step=step, restore_only_lora_params=lora_only
        )
    except Exception as err:  # noqa: BLE001 - orbax raises many types for a damaged checkpoint
        others = [s for s in _steps(root) if s != step]
        fix = f"export another step ({', '.join(map(str, others))})" if others else "retrain, or restore it from a copy"
        reason = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        raise RunError(f"checkpoint={root}/{step}: cannot be restored ({reason}); {fix}") from err
    if restored != step:
        raise RunError(f"checkpoint={root}/{step}: could not restore the actor checkpoint; retrain or restore it")
