"""Load gpt-oss checkpoints in Hugging Face layout (bf16/fp32 experts or the published MXFP4 experts).

Each tensor is read from the safetensors files through a memory map, mapped to the nnx parameter
path, dequantised when it is MXFP4, cast to model.param_dtype and placed with the parameter's
sharding (experts split along the expert axis), one tensor at a time.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from typing import Any

import jax
import ml_dtypes
import numpy as np
from flax import nnx

from rlexp.config.schema import ModelConfig
from rlexp.errors import RlexpError
from rlexp.models.checkpoint import local_copy, safetensors_files
from rlexp.models.gpt_oss import model as model_lib
from rlexp.models.gpt_oss.mxfp4 import dequantize
from rlexp.models.tunix_text import decoder_dims, jnp_dtype

NP_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "U8": np.uint8,
    "I8": np.int8,
    "I32": np.int32,
    "I64": np.int64,
}


def read_safetensors(path: str) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) for every tensor of one file; arrays are read-only views of a memory map."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        yield name, data[start:end].view(NP_DTYPES[meta["dtype"]]).reshape(meta["shape"])


def tunix_config(m: ModelConfig) -> model_lib.ModelConfig:
    x = m.extra
    sliding: tuple[bool, ...] = ()
    if x.get("layer_types"):
        sliding = tuple(t == "sliding_attention" for t in x["layer_types"])
    return model_lib.ModelConfig(
        **decoder_dims(m),
        num_experts=int(x["num_experts"]),
        experts_per_token=int(x["experts_per_token"]),
        sliding_window=int(x["sliding_window"]),
        sliding_layers=sliding,
        rope_theta=float(x["rope_theta"]),
        rope_scaling=tuple(sorted(dict(x.get("rope_scaling") or {}).items())),
        norm_eps=float(x.get("norm_eps", 1e-5)),
        swiglu_limit=float(x.get("swiglu_limit", 7.0)),
        use_tied_embedding=bool(x.get("tie_word_embeddings", False)),
        remat=m.remat == "full",
        dtype=jnp_dtype(m.dtype),
        param_dtype=jnp_dtype(m.param_dtype),
    )


_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")


def map_tensor(name: str, value: np.ndarray, cfg: model_lib.ModelConfig) -> tuple[str, np.ndarray] | None:
    """(nnx path, array in nnx layout) for one checkpoint tensor; None for tensors the model does not use."""
    d, n, k, h = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    if name == "model.embed_tokens.weight":
        return "embedder.input_embedding", value
    if name == "model.norm.weight":
        return "final_norm.w", value
    if name == "lm_head.weight":
        return ("lm_head", value.T) if not cfg.use_tied_embedding else None
    match = _LAYER.fullmatch(name)
    if not match:
        return None
    i, rest = match.groups()
    p = f"layers.{i}"
    table = {
        "self_attn.q_proj.weight": ("attn.q_proj", lambda v: v.T.reshape(d, n, h)),
        "self_attn.k_proj.weight": ("attn.k_proj", lambda v: v.T.reshape(d, k, h)),
        "self_attn.v_proj.weight": ("attn.v_proj", lambda v: v.T.reshape(d, k, h)),
        "self_attn.o_proj.weight": ("attn.o_proj", lambda v: v.T.reshape(n, h, d)),
        "self_attn.q_proj.bias": ("attn.q_bias", lambda v: v.reshape(n, h)),
        "self_attn.k_proj.bias": ("attn.k_bias", lambda v: v.reshape(k, h)),
        "self_attn.v_proj.bias": ("attn.v_bias", lambda v: v.reshape(k, h)),
        "self_attn.o_proj.bias": ("attn.o_bias", lambda v: v),
        "self_attn.sinks": ("attn.sinks", lambda v: v),
        "mlp.router.weight": ("mlp.router_w", lambda v: v.T),
        "mlp.router.bias": ("mlp.router_b", lambda v: v),
        "mlp.experts.gate_up_proj": ("mlp.gate_up_proj", lambda v: v),
        "mlp.experts.gate_up_proj_bias": ("mlp.gate_up_bias", lambda v: v),
        "mlp.experts.down_proj": ("mlp.down_proj", lambda v: v),
        "mlp.experts.down_proj_bias": ("mlp.down_bias", lambda v: v),
        "input_layernorm.weight": ("input_layernorm.w", lambda v: v),
        "post_attention_layernorm.weight": ("post_attention_layernorm.w", lambda v: v),
    }
    if rest not in table:
        return None
    path, fn = table[rest]
    return f"{p}.{path}", fn(value)


def checkpoint_tensors(ckpt_dir: str, cfg: model_lib.ModelConfig) -> Iterator[tuple[str, np.ndarray]]:
    """(nnx path, array) for every used tensor; MXFP4 `*_blocks`/`*_scales` pairs arrive dequantised."""
    pending: dict[str, dict[str, np.ndarray]] = {}
    for path in safetensors_files(ckpt_dir):
        for name, value in read_safetensors(path):
            if name.endswith(("_blocks", "_scales")):
                base, part = name.rsplit("_", 1)
                pending.setdefault(base, {})[part] = value
                if len(pending[base]) < 2:
                    continue
                pair = pending.pop(base)
                # [E, out, in/32, 16] -> [E, out, in] -> [E, in, out]: the bf16 checkpoint layout
                name, value = base, dequantize(pair["blocks"], pair["scales"]).transpose(0, 2, 1)
            mapped = map_tensor(name, value, cfg)
            if mapped is not None:
                yield mapped
    if pending:
        raise RlexpError(f"{ckpt_dir}: MXFP4 tensors without their pair: {', '.join(sorted(pending))}")


def _path_key(path: tuple) -> str:
    return ".".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)


def create(m: ModelConfig, ckpt_dir: str, mesh: Any = None) -> model_lib.GptOss:
    """A GptOss model holding the checkpoint's weights, sharded on `mesh` when given."""
    cfg = tunix_config(m)
    folder = local_copy(ckpt_dir)
    abstract = nnx.eval_shape(lambda: model_lib.GptOss(cfg, rngs=nnx.Rngs(params=0)))
    graph_def, abs_state = nnx.split(abstract)
    shapes = {_path_key(p): v for p, v in jax.tree_util.tree_flatten_with_path(abs_state.to_pure_dict())[0]}
    shardings = None
    if mesh is not None:
        flat = jax.tree_util.tree_flatten_with_path(nnx.get_named_sharding(abs_state, mesh).to_pure_dict())[0]
        shardings = {_path_key(p): s for p, s in flat}
    loaded: dict[str, Any] = {}
    np_dtype = np.dtype(cfg.param_dtype)
    for key, value in checkpoint_tensors(folder, cfg):
        if key not in shapes:
            continue
        if tuple(value.shape) != tuple(shapes[key].shape):
            raise RlexpError(
                f"{ckpt_dir}: tensor for {key} has shape {tuple(value.shape)}, model={m.name} expects "
                f"{tuple(shapes[key].shape)}; pick the model option matching the checkpoint"
            )
        array = np.asarray(value).astype(np_dtype)
        loaded[key] = jax.device_put(array, shardings[key]) if shardings else jax.device_put(array)
    missing = sorted(set(shapes) - set(loaded))
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise RlexpError(f"{ckpt_dir}: checkpoint lacks weights for {shown}")

    def fill(path: tuple, _leaf: Any) -> Any:
        return loaded[_path_key(path)]

    state = jax.tree_util.tree_map_with_path(fill, abs_state.to_pure_dict())
    return nnx.merge(graph_def, state)
