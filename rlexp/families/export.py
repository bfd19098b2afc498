"""A run's actor checkpoint as a Hugging Face model folder (what `python -m rlexp.export` writes).

Loads the run's base model (its `.hydra/config.yaml` names it), restores the actor checkpoint
(merging LoRA adapters when the run trained some), converts the weights back to the Hugging Face
names and layouts of the family (its spec's `hf_names`), and writes model.safetensors with the base checkpoint's
config.json, a tokenizer that adds BOS as rlexp's sampler does, the run's chat template, generation_config.json
with the eval's sampling and a model card (rlexp.models.export_extras); `--adapter` writes a PEFT folder instead. Tensors of the base checkpoint that rlexp does not train (a vision
tower, say) are copied unchanged, so `transformers` loads the folder like the original.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.config.schema import ModelConfig, RlexpConfig
from rlexp.errors import RlexpError
from rlexp.families.load import load_model
from rlexp.families.registry import family_of
from rlexp.families.spec import HfNames
from rlexp.models.export import (
    check_out,
    find_checkpoint,
    flat_params,
    restore_actor,
    run_config,
    source_tensors,
    write_shards,
)
from rlexp.models.hub import CONFIG_AND_TOKENIZER_FILES
from rlexp.models.loader import resolve_model_dir

log = logging.getLogger(__name__)
# files a Hugging Face tokenizer loads from; a base folder with none of them has no tokenizer to export
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def hf_tensors(m: ModelConfig, params: dict[str, np.ndarray], prefix: str = "model.") -> dict[str, np.ndarray]:
    """Hugging Face tensors of a family's nnx parameters (the inverse of its loader's mapping)."""
    out: dict[str, np.ndarray] = {}
    for key, v in params.items():
        for hf_key, value in hf_names(m, key, v, prefix) or []:
            out[hf_key] = np.ascontiguousarray(value)
    return out


def hf_names(m: ModelConfig, key: str, v: np.ndarray, prefix: str) -> HfNames | None:
    """The embedding, final norm and LM head, which every family names alike; the rest is the family's."""
    top = {
        "embedder.input_embedding": f"{prefix}embed_tokens.weight",
        "final_norm.w": f"{prefix}norm.weight",
        "final_norm.scale": f"{prefix}norm.weight",
    }
    if key in top:
        return [(top[key], v)]
    if key in ("lm_head.w", "lm_head"):
        return [("lm_head.weight", v.T)]
    return family_of(m).hf_names(m, key, v, prefix)


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
    from rlexp.models.loader import load_tokenizer
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
    source = source_tensors(base_dir)
    prefix = "model.language_model." if any(k.startswith("model.language_model.") for k in source) else "model."
    if adapter:
        from rlexp.models.export_peft import adapter_tensors, write_adapter
        from rlexp.models.lora import lora_einsums

        to_hf = lambda params: hf_tensors(m, params, prefix)  # noqa: E731 - the family's names, this prefix
        tensors = adapter_tensors(m, flat_params(model), lora_einsums(model), to_hf)
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
    chosen = sampling(cfg) if sampling is not None else {"temperature": 0.0, "top_p": 1.0, "top_k": 1}
    if any((base_dir / name).is_file() for name in TOKENIZER_FILES):
        export_extras.finish_folder(dest, cfg, load_tokenizer(m), chosen)
    else:  # a base folder without a tokenizer (weights only): nothing to make answer as rlexp's sampler does
        log.warning("rlexp export: %s has no tokenizer; %s gets weights and config.json only", base_dir, dest)
    (dest / "README.md").write_text(
        export_extras.model_card(cfg, run_dir, step, command, adapter=adapter, sampling=chosen)
    )
    return dest


def _merged_tensors(m: ModelConfig, model: Any, lora: Any, source: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The Hugging Face tensors of the restored model, adapters merged, with the base's untrained tensors."""
    if lora.rank > 0:
        from rlexp.models.lora import merged_state

        params = merged_state(model, lora.alpha, lora.rank)
    else:
        params = flat_params(model)
    tensors = hf_tensors(m, params, prefix)
    drops = family_of(m).export_drops  # gpt-oss: MXFP4 experts are written back dequantised
    source = {k: v for k, v in source.items() if not (drops and k.endswith(drops))}
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
