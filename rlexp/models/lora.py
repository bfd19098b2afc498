"""LoRA adapters through qwix (`trainer.lora.rank > 0`), and merging them back into the base weights.

`apply_lora(model, lora_cfg, mesh)` returns a model whose only `nnx.LoRAParam`s are the adapters;
Tunix then trains and checkpoints only those. The default `module_path` names Qwen3/Llama projections;
gemma4 and gpt-oss name theirs differently, so the default is translated per family.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import jax
import numpy as np
from flax import nnx

from rlexp.config.schema import LoraConfig
from rlexp.errors import ConfigError

DEFAULT_MODULE_PATH = LoraConfig().module_path
FAMILY_MODULE_PATHS = {
    "Gemma4": ".*(q_einsum|kv_einsum|attn_vec_einsum|gate_proj|up_proj|down_proj).*",
    "GptOss": r".*layers/\d+/attn$",  # q/k/v/o projections; experts are not Linear layers
}


def module_path_for(model: Any, module_path: str) -> str:
    if module_path != DEFAULT_MODULE_PATH:
        return module_path
    for cls in type(model).__mro__:
        if cls.__name__ in FAMILY_MODULE_PATHS:
            return FAMILY_MODULE_PATHS[cls.__name__]
    return module_path


def apply_lora(model: Any, lora_cfg: LoraConfig, mesh: Any = None, seed: int = 0) -> Any:
    """The model with rank-`lora_cfg.rank` adapters on the matched projections, sharded like their weights."""
    import qwix
    from tunix.utils import compat

    from rlexp.perf.bf16_gemm import keep_plain_dots

    if lora_cfg.rank <= 0:
        return model
    path = module_path_for(model, lora_cfg.module_path)
    provider = qwix.LoraProvider(module_path=path, rank=lora_cfg.rank, alpha=lora_cfg.alpha)
    keep_plain_dots(model)  # before qwix's first pass, which creates the adapters where it sees the dots
    inputs = model.get_model_input()
    swaps = _plain_first_pass(model)
    lora_model = model
    try:
        with compat.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
            rngs = nnx.Rngs(seed)
            lora_model = qwix.apply_lora_to_model(model, provider, rngs=rngs, skip_nnx_init=True, **inputs)
            _compiled_first_pass(lora_model, rngs, inputs)
            if mesh is not None:
                state = nnx.state(lora_model)
                nnx.update(lora_model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
    finally:
        _restore_configs([model, lora_model], swaps)
    if not jax.tree_util.tree_leaves(nnx.state(lora_model, nnx.LoRAParam)):
        raise ConfigError("trainer.lora.module_path", lora_cfg.module_path, f"matched no projection (used {path!r})")
    return lora_model


def _compiled_first_pass(lora_model: Any, rngs: Any, inputs: dict[str, Any]) -> None:
    """qwix's first pass, which creates the adapters, as one compiled program: qwix runs it eagerly, op by op, and
    each op compiled a program of its own (about 290 for a tiny gemma4: 9.5 CPU-s cold, and their cache reads
    after). The adapters come out bit for bit the same (tests/models/test_lora.py). The attributes are the ones
    qwix's own first pass sets and unsets around it."""
    lora_model.set_attributes(qwix_rngs=rngs, disable_quant_stats_update=True)

    @nnx.jit
    def first_pass(model: Any, kwargs: dict[str, Any]) -> None:
        model(**kwargs)

    first_pass(lora_model, inputs)
    lora_model.set_attributes(disable_quant_stats_update=False, qwix_rngs=None)


def _plain_first_pass(model: Any) -> list[tuple[str, Any, Any]]:
    """Configure the model's modules for qwix's first pass; (attribute, config for the pass, own config) triples
    for `_restore_configs`. qwix creates the adapters in an eager first pass, finding each projection's weight
    by identity, or by a unique shape, inside the module it intercepts:
    - a weight cast to the compute dtype there is a new array, and gpt-oss's attention holds k and v of one
      shape: with bf16 compute over float32 weights, neither got an adapter and the first traced pass failed.
      The pass computes in the weights' dtype, so the casts return the weights themselves;
    - under `model.remat=full` the layers run as copies inside `nnx.remat`, where qwix saw no projection at all
      ("matched no projection"). The pass runs without remat, which changes no value.
    The adapters take the weights' dtype either way."""
    swaps = []
    for _, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.Module):
            continue
        for attr in ("cfg", "config"):  # rlexp's gpt-oss, Tunix's models
            cfg = getattr(node, attr, None)
            if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
                continue
            changes = {}
            if hasattr(cfg, "param_dtype") and getattr(cfg, "dtype", None) != cfg.param_dtype:
                changes["dtype"] = cfg.param_dtype
            if getattr(cfg, "remat", False) is True:
                changes["remat"] = False
            remat = getattr(cfg, "remat_config", None)
            if remat is not None and getattr(remat, "name", "NONE") != "NONE":
                changes["remat_config"] = type(remat).NONE
            if changes:
                setattr(node, attr, dataclasses.replace(cfg, **changes))
                swaps.append((attr, getattr(node, attr), cfg))
    return swaps


def _restore_configs(models: list[Any], swaps: list[tuple[str, Any, Any]]) -> None:
    """Undo `_plain_first_pass` in the model and in the copy qwix returns (which shares its configs)."""
    for model in models:
        for _, node in nnx.iter_graph(model):
            for attr, first_pass, own in swaps:
                if isinstance(node, nnx.Module) and getattr(node, attr, None) is first_pass:
                    setattr(node, attr, own)


def lora_einsums(model: Any) -> dict[str, tuple[str, str, str]]:
    """{weight path: (a subscripts, b subscripts, weight subscripts)} of adapters qwix put on einsums."""
    out = {}
    for path, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.Module):
            continue
        for attr, value in vars(node).items():
            if attr.endswith("_lora_einsum_str") and isinstance(value, str):
                weight = attr[: -len("_lora_einsum_str")]
                _, a_sub, b_sub = value.split("->")[0].split(",")
                rhs = getattr(node, "einsum_str", "").split("->")[0].split(",")
                w_sub = rhs[1] if len(rhs) == 2 else None
                out[".".join(str(p) for p in (*path, weight))] = (a_sub, b_sub, w_sub)
    return out


def merged_state(model: Any, alpha: float, rank: int) -> dict[str, np.ndarray]:
    """Flat {param path: array} of the model with every adapter folded in: W + A @ B * alpha / rank."""
    flat = {
        ".".join(str(k) for k in path): np.asarray(v)
        for path, v in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model, nnx.Param)))[0]
        for path in [tuple(getattr(p, "key", getattr(p, "idx", p)) for p in path)]
    }
    einsums = lora_einsums(model)
    out = {k: v for k, v in flat.items() if not k.endswith(("_lora_a", "_lora_b"))}
    for key in [k for k in flat if k.endswith("_lora_a")]:
        base = key[: -len("_lora_a")]
        # in float32: numpy's einsum has no bfloat16 (adapters of a model.param_dtype=bfloat16 run are bf16)
        a, b = flat[key].astype(np.float32), flat[base + "_lora_b"].astype(np.float32)
        weight_key = base if base in out else f"{base}.value"
        w = out[weight_key]
        a_sub, b_sub, w_sub = einsums.get(base, (None, None, None))
        if w_sub:  # the weight's own axis order, e.g. kv_einsum CKDH from A "Dr" and B "rCKH"
            delta = np.einsum(f"{a_sub},{b_sub}->{w_sub}", a, b)
        else:  # dot_general / contraction-first einsums: A [in..., r], B [r, out...]
            delta = np.tensordot(a, b, axes=([-1], [0])).reshape(w.shape)
        out[weight_key] = (w.astype(np.float32) + delta * (alpha / rank)).astype(w.dtype)
    return out
