"""Bytes per chip a run needs: parameters, optimizer state, gradients, reference model, rollout KV cache.

Pure Python (no JAX): the preflight, the launcher dry run and `--cfg` call it before any weight is
read. The trainer shards every weight over all its devices (fsdp x tp), keeps AdamW's two moments
in the parameter dtype, and holds a frozen reference copy when the loss needs one (`loads_reference_copy`: with LoRA the
reference is the frozen base itself). The rollout KV cache holds batch_size x num_generations
sequences of max_prompt_tokens + max_completion_tokens, split over the data-parallel devices that
sample. `activations` is a rough bound for one training micro-batch (logits dominate for large
vocabularies), not a measurement.
"""

from __future__ import annotations

from typing import Any

from rlexp.config.derived import loads_reference_copy, resolve_mesh, trainer_devices
from rlexp.config.hardware import HBM_GIB_PER_CHIP
from rlexp.config.schema import ModelConfig, RlexpConfig
from rlexp.errors import ConfigError

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
GIB = 2**30
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _gemma4_layers(m: ModelConfig) -> list[dict[str, Any]]:
    x = m.extra
    period = int(x.get("sliding_window_pattern", 6))
    shared_from = m.num_layers - int(x.get("num_kv_shared_layers", 0))
    out = []
    for i in range(m.num_layers):
        is_global = (i + 1) % period == 0 or i == m.num_layers - 1
        hidden = m.hidden_dim * (2 if x.get("use_double_wide_mlp") and i >= shared_from else 1)
        out.append(
            {
                "head_dim": int(x.get("global_head_dim", m.head_dim)) if is_global else m.head_dim,
                "window": None if is_global else int(x["sliding_window"]),
                "kv": i < shared_from,  # KV-shared layers reuse an earlier layer's cache
                "hidden": hidden,
                # 26B-A4B: global layers have fewer KV heads, and no value projection (values are the keys)
                "kv_heads": int(x.get("num_global_kv_heads") or m.num_kv_heads) if is_global else m.num_kv_heads,
                "k_eq_v": bool(is_global and x.get("attention_k_eq_v")),
            }
        )
    return out


def _layers(m: ModelConfig) -> list[dict[str, Any]]:
    if m.family == "gemma4":
        return _gemma4_layers(m)
    window = m.extra.get("sliding_window") if m.family == "gpt_oss" else None
    # gpt-oss alternates sliding (even layers) and full attention
    return [
        {"head_dim": m.head_dim, "window": window if i % 2 == 0 else None, "kv": True, "hidden": m.hidden_dim}
        for i in range(m.num_layers)
    ]


def param_count(m: ModelConfig) -> int:
    """Weights of the model option (biases and norms included), from its dimensions alone."""
    d, v, n, k = m.embed_dim, m.vocab_size, m.num_heads, m.num_kv_heads
    x = m.extra or {}
    total = v * d + d  # embedding + final norm
    if not x.get("tie_word_embeddings", False):
        total += v * d
    for layer in _layers(m):
        h, f = layer["head_dim"], layer["hidden"]
        k = layer.get("kv_heads", m.num_kv_heads)
        attn = d * n * h + (1 if layer.get("k_eq_v") else 2) * d * k * h + n * h * d
        norms = 2 * d
        if m.family == "gpt_oss":
            e = int(x["num_experts"])
            attn += n * h + 2 * k * h + d + n  # q/k/v/o biases and per-head sinks
            mlp = d * e + e + e * (d * 2 * f + 2 * f + f * d + d)
        elif m.family == "qwen3" and x.get("num_experts"):  # Qwen3-MoE: a router, experts of width hidden_dim
            e = int(x["num_experts"])
            mlp = d * e + e * 3 * d * f
        else:
            mlp = 3 * d * f
        if m.family in ("qwen3", "gemma4"):
            norms += 2 * h  # q and k norms
        if m.family == "gemma4":
            p = int(x.get("per_layer_input_dim", 0))
            norms += 2 * d + 1  # pre/post feed-forward norms, layer scalar
            if p:
                mlp += 2 * d * p + d  # per-layer input gate, projection, norm
            if x.get("num_experts"):  # router (+ its scale, per-expert scales), experts, their three norms
                e, fe = int(x["num_experts"]), int(x["expert_dim"])
                mlp += d * e + d + e + e * 3 * d * fe + 3 * d
        total += attn + mlp + norms
    if m.family == "gemma4" and x.get("per_layer_input_dim"):
        p = int(x["per_layer_input_dim"])
        total += v * m.num_layers * p + d * m.num_layers * p + p
    return total


def lora_param_count(m: ModelConfig, rank: int) -> int:
    """Adapter weights of rank `rank` on every attention and dense MLP projection."""
    d, n, k = m.embed_dim, m.num_heads, m.num_kv_heads
    total = 0
    for layer in _layers(m):
        h, f = layer["head_dim"], layer["hidden"]
        total += rank * ((d + n * h) + 2 * (d + k * h) + (n * h + d))
        if m.family != "gpt_oss" and not (m.extra or {}).get("num_experts"):  # experts are not Linear layers
            total += rank * (2 * (d + f) + (f + d))
    return total


def kv_cache_bytes_per_sequence(m: ModelConfig, tokens: int) -> int:
    item = BYTES[m.dtype]
    total = 0
    for layer in _layers(m):
        if not layer["kv"]:
            continue
        length = min(tokens, layer["window"]) if layer["window"] and m.family == "gemma4" else tokens
        total += 2 * length * layer.get("kv_heads", m.num_kv_heads) * layer["head_dim"] * item
    return total


def capacity_bytes(cfg: RlexpConfig) -> int | None:
    s = cfg.slice
    gib = s.hbm_gib_per_device
    if not gib and s.kind == "tpu":
        for prefix, value in HBM_GIB_PER_CHIP.items():
            if s.name.startswith(prefix) or str(getattr(s, "accelerator", "")).startswith(prefix):
                gib = value
                break
    return int(gib * GIB) if gib else None


def estimate_memory(cfg: RlexpConfig) -> dict[str, Any]:
    """Bytes per trainer chip by component, the total, and the chip's capacity (None when unknown)."""
    m, t, s = cfg.model, cfg.trainer, cfg.slice
    fsdp, tp = resolve_mesh(s)
    chips = trainer_devices(s)
    p_bytes = BYTES[m.param_dtype]
    n_params = param_count(m)
    lora = t.lora.rank > 0
    trainable = lora_param_count(m, t.lora.rank) if lora else n_params
    stored = n_params + (trainable if lora else 0)
    params = stored * p_bytes // chips
    optimizer = 2 * trainable * p_bytes // chips
    gradients = trainable * p_bytes // chips
    reference = n_params * p_bytes // chips if loads_reference_copy(t) else 0
    # PPO's critic: the same architecture and a value head, trained in full (weights, AdamW moments, gradients)
    critic = 4 * (n_params + m.embed_dim + 1) * p_bytes // chips if t.algorithm == "ppo" else 0
    tokens = t.max_prompt_tokens + t.max_completion_tokens
    sequences = t.batch_size * t.num_generations
    sampler_dp = s.rollout_devices // tp if s.rollout_devices else fsdp
    # agent=tools: a later turn's prompt holds the episode so far, and the cache room for one more whole turn
    turn = (cfg.agent.max_turn_tokens or t.max_completion_tokens) + 16 if cfg.agent.kind == "tools" else 0
    kv_cache = kv_cache_bytes_per_sequence(m, tokens + turn) * -(-sequences // max(sampler_dp, 1)) // tp
    micro = t.micro_batch_size * t.num_generations if t.micro_batch_size else sequences  # sequences per pass
    micro_per_chip = -(-micro // fsdp)
    layer_io = (1 if m.remat == "full" else 12) * micro_per_chip * tokens * m.embed_dim * BYTES[m.dtype]
    activations = m.num_layers * layer_io // tp + 2 * micro_per_chip * tokens * m.vocab_size * 4 // tp
    total = params + optimizer + gradients + reference + critic + kv_cache + activations
    out: dict[str, Any] = {
        "model": m.name,
        "slice": s.name,
        "trainer_chips": chips,
        "mesh": {"fsdp": fsdp, "tp": tp},
        "param_count": n_params,
        "trainable_param_count": trainable,
        "params": params,
        "optimizer": optimizer,
        "gradients": gradients,
        "reference": reference,
        "critic": critic,
        "kv_cache": kv_cache,
        "activations": activations,
        "total": total,
        "capacity": capacity_bytes(cfg),
    }
    if s.rollout_devices:
        out["rollout_chip_total"] = n_params * p_bytes // s.rollout_devices + kv_cache
    return out


def format_estimate(est: dict[str, Any]) -> str:
    """One line per component in GiB, for the preflight and launcher dry runs."""
    keys = ("params", "optimizer", "gradients", "reference", "critic", "kv_cache", "activations", "total")
    parts = [f"{k} {est[k] / GIB:.2f}" for k in keys]
    cap = est["capacity"]
    cap_s = f"{cap / GIB:.1f} GiB" if cap else "unknown"
    return (
        f"memory per chip for {est['model']} on {est['slice']} ({est['trainer_chips']} trainer chips, "
        f"{est['param_count'] / 1e9:.2f}B params): " + ", ".join(parts) + f" GiB; capacity {cap_s}"
    )


def check_fits(cfg: RlexpConfig) -> dict[str, Any]:
    """The estimate; raises ConfigError with the numbers when the total exceeds the chip's memory."""
    est = estimate_memory(cfg)
    cap = est["capacity"]
    if cap and est["total"] > cap:
        parts = ("params", "optimizer", "gradients", "reference", "critic", "kv_cache", "activations")
        largest = max(parts, key=lambda k: est[k])
        fixes = {
            "activations": "fewer or shorter sequences per training step, or model.remat=full",
            "kv_cache": "fewer or shorter rollouts (batch_size x num_generations, max_completion_tokens)",
            "reference": "trainer.beta=0 (no reference model) or trainer.lora.rank > 0",
            "critic": "a larger slice (the critic is trained in full, LoRA or not)",
        }.get(largest, "a larger slice or trainer.lora.rank > 0")
        if largest not in ("activations", "kv_cache", "reference") and cfg.model.param_dtype == "float32":
            fixes += ", or model.param_dtype=bfloat16"
        raise ConfigError(
            "slice",
            cfg.slice.name,
            f"{format_estimate(est)} — does not fit; largest is {largest}: try {fixes}",
        )
    return est
