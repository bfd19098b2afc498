"""A LoRA run's adapters as a PEFT folder (`rlexp export RUN --out DIR --adapter`): adapter_config.json and
adapter_model.safetensors, which `PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), DIR)` loads
onto the base model with the merged export's logits.

qwix's adapters are contraction-first: A [in..., r] and B [r, out...] with delta W = A @ B * alpha / rank, W laid out
[in..., out...]. PEFT's are lora_A [r, in] and lora_B [out, r] on a Linear of weight [out, in], scaled by
lora_alpha / r (the same). So lora_A = A.reshape(in, r).T and lora_B = B.reshape(r, out).T, wherever the family's
Hugging Face weight is the nnx weight as W.reshape(in, out).T; the export checks that on each adapted weight (through
the family's own name mapping, `hf_tensors`) and refuses in one line where it is not (gemma4's fused k/v einsum).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.config.schema import ModelConfig, RlexpConfig
from rlexp.errors import RlexpError

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def adapter_tensors(
    m: ModelConfig,
    params: dict[str, np.ndarray],
    einsums: dict[str, tuple[str, str, str]],
    to_hf: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """{"base_model.model.<module>.lora_A.weight": [r, in], "...lora_B.weight": [out, r]} of a LoRA model's
    adapters. `params`: its flat parameters, `_lora_a`/`_lora_b` leaves included (rlexp.models.export.flat_params);
    `einsums`: qwix's einsum adapters (rlexp.models.lora.lora_einsums); `to_hf`: the family's nnx -> Hugging Face
    tensors (rlexp.models.export.hf_tensors; passed in, as that module calls this one)."""
    out: dict[str, np.ndarray] = {}
    for key in sorted(k for k in params if k.endswith("_lora_a")):
        base = key[: -len("_lora_a")]
        a, b = params[key].astype(np.float32), params[base + "_lora_b"].astype(np.float32)
        weight_key = base if base in params else f"{base}.value"
        w = params[weight_key]
        a_sub, b_sub, w_sub = einsums.get(base, (None, None, None))
        if w_sub and w_sub != a_sub[:-1] + b_sub[1:]:  # delta not laid out [in..., out...] (merged_state's einsum)
            raise _no_peft_layout(m, weight_key)
        rank = a.shape[-1]
        n_in = int(np.prod(a.shape[:-1]))
        mapped = to_hf({weight_key: w})
        names = [n for n, v in mapped.items() if n.endswith(".weight")]
        if len(mapped) != 1 or not names or w.size != n_in * int(np.prod(b.shape[1:])):
            raise _no_peft_layout(m, weight_key)
        (name,) = names
        hf_w = mapped[name]
        if hf_w.shape != (w.size // n_in, n_in) or not np.array_equal(hf_w, w.reshape(n_in, -1).T):
            raise _no_peft_layout(m, weight_key)
        module = "base_model.model." + name[: -len(".weight")]
        out[f"{module}.lora_A.weight"] = np.ascontiguousarray(a.reshape(n_in, rank).T)
        out[f"{module}.lora_B.weight"] = np.ascontiguousarray(b.reshape(rank, -1).T)
    if not out:
        raise RlexpError("--adapter: the checkpoint holds no LoRA adapters; export without --adapter")
    return out


def _no_peft_layout(m: ModelConfig, key: str) -> RlexpError:
    return RlexpError(
        f"--adapter: {m.family}'s {key} has no PEFT Linear layout; export the merged model (without --adapter)"
    )


def adapter_config(cfg: RlexpConfig, tensors: dict[str, np.ndarray], base: str) -> dict[str, Any]:
    """adapter_config.json: the adapted modules by full name (exactly those rlexp adapted), rank and alpha."""
    lora = cfg.trainer.lora
    modules = sorted({k[len("base_model.model.") : -len(".lora_A.weight")] for k in tensors if ".lora_A." in k})
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,  # rlexp (qwix) scales by alpha / rank
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "target_modules": modules,
        "modules_to_save": None,
    }


def write_adapter(dest: Path, cfg: RlexpConfig, tensors: dict[str, np.ndarray], base: str, step: int) -> None:
    from safetensors.numpy import save_file

    save_file(tensors, str(dest / "adapter_model.safetensors"), metadata={"format": "pt", "rlexp_step": str(step)})
    (dest / "adapter_config.json").write_text(json.dumps(adapter_config(cfg, tensors, base), indent=2) + "\n")
