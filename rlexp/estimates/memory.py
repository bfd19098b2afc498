"""Bytes per chip a run needs: parameters, optimizer state, gradients, reference model, rollout KV cache.

Pure Python (no JAX): the preflight, the launcher dry run and `--cfg` call it before any weight is
read. The trainer shards every weight over all its devices (fsdp x tp), keeps AdamW's two moments
in the parameter dtype, and holds a frozen reference copy when the loss needs one (`reference_copy`: with LoRA the
reference is the frozen base itself) or the algorithm's own model in that role (its spec's `reference_model`: OPD's
teacher), and a critic when the algorithm trains one (`needs_critic`). The rollout KV cache holds one sampling
call's sequences (`TrainerConfig.rollout_prompts()` x num_generations) of prompt + completion tokens (`lengths`:
the config's caps, or an environment's own prompt and turn lengths), split over the data-parallel devices that
sample. Bounded staleness (trainer.off_policy)
adds its queued batches (`off_policy`) to the trainer's chip and, with rollout devices of their own, a staged copy of
the weights to each of them. `activations` is a rough bound for one training micro-batch (logits dominate for large
vocabularies), not a measurement. The model's terms (`model_terms`: weights, adapter weights, cache per sequence)
come from its family's spec; `check_fits` is the rule `rlexp.checks.check_config` runs with them.
"""

from __future__ import annotations

from typing import Any

from rlexp.algorithms import off_policy
from rlexp.algorithms.registry import algorithm_of, reference_copy
from rlexp.config.derived import resolve_mesh, trainer_devices
from rlexp.config.hardware import HBM_GIB_PER_CHIP
from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError
from rlexp.estimates.lengths import CAPS, Lengths, of
from rlexp.estimates.model_terms import BYTES, kv_cache_bytes_per_sequence, lora_param_count, param_count

GIB = 2**30


def capacity_bytes(cfg: RlexpConfig) -> int | None:
    s = cfg.slice
    gib = s.hbm_gib_per_device
    if not gib and s.kind == "tpu":
        for prefix, value in HBM_GIB_PER_CHIP.items():
            if s.name.startswith(prefix) or str(getattr(s, "accelerator", "")).startswith(prefix):
                gib = value
                break
    return int(gib * GIB) if gib else None


def estimate_memory(cfg: RlexpConfig, lengths: Lengths | None = None) -> dict[str, Any]:
    """Bytes per trainer chip by component, the total, and the chip's capacity (None when unknown); `lengths`:
    the run's sequence lengths (rlexp.estimates.lengths; None: the config's caps)."""
    n = of(cfg, lengths)
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
    spec = algorithm_of(t)
    reference = n_params * p_bytes // chips if reference_copy(t) else 0
    own = spec.reference_model(cfg)  # frozen: weights only
    reference += param_count(own) * BYTES[own.param_dtype] // chips if own is not None else 0
    # a critic (PPO's): the same architecture and a value head, trained in full (weights, AdamW moments, gradients)
    critic = 4 * (n_params + m.embed_dim + 1) * p_bytes // chips if spec.needs_critic else 0
    tokens = n.prompt + n.completion
    sequences = t.batch_size * t.num_generations
    sampled = t.rollout_prompts() * t.num_generations  # the sequences of one sampling call, whose KV cache is held
    sampler_dp = s.rollout_devices // tp if s.rollout_devices else fsdp
    # agent=tools: a later turn's prompt holds the episode so far, and the cache room for one more whole turn
    turn = n.per_turn() + 16 if cfg.agent.kind == "tools" else 0
    kv_cache = kv_cache_bytes_per_sequence(m, tokens + turn) * -(-sampled // max(sampler_dp, 1)) // tp
    micro = t.micro_batch_size * t.num_generations if t.micro_batch_size else sequences  # sequences per pass
    micro_per_chip = -(-micro // fsdp)
    layer_io = (1 if m.remat == "full" else 12) * micro_per_chip * tokens * m.embed_dim * BYTES[m.dtype]
    activations = m.num_layers * layer_io // tp + 2 * micro_per_chip * tokens * m.vocab_size * 4 // tp
    # trainer.off_policy: the k batches sampled ahead (on one trainer chip: the default device), and, with rollout
    # devices of their own, the staged copy of the weights the trainer pushes while the rollout samples
    queued = off_policy.queue_bytes(cfg, spec.needs_reference(t))
    staged = (
        (trainable if lora else n_params) * p_bytes // max(s.rollout_devices, 1) if off_policy.concurrent(cfg) else 0
    )
    total = params + optimizer + gradients + reference + critic + kv_cache + activations + queued
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
        "off_policy": queued,
        "total": total,
        "capacity": capacity_bytes(cfg),
    }
    if n.source != CAPS:
        out["lengths"] = n.to_dict()
    if s.rollout_devices:
        out["rollout_chip_total"] = n_params * p_bytes // s.rollout_devices + kv_cache + staged
        if staged:
            out["off_policy_staged_weights"] = staged
    return out


def format_estimate(est: dict[str, Any]) -> str:
    """One line per component in GiB, for the preflight and launcher dry runs."""
    keys = ("params", "optimizer", "gradients", "reference", "critic", "kv_cache", "activations", "off_policy", "total")
    parts = [f"{k} {est[k] / GIB:.2f}" for k in keys if k != "off_policy" or est.get(k)]
    cap = est["capacity"]
    cap_s = f"{cap / GIB:.1f} GiB" if cap else "unknown"
    text = (
        f"memory per chip for {est['model']} on {est['slice']} ({est['trainer_chips']} trainer chips, "
        f"{est['param_count'] / 1e9:.2f}B params): " + ", ".join(parts) + f" GiB; capacity {cap_s}"
    )
    if "lengths" in est:  # an environment's own prompt and turn lengths (rlexp.estimates.lengths)
        n = est["lengths"]
        turns = f", {n['turns']} turns" if n["turns"] > 1 else ""
        text += f"; prompts {n['prompt']} + completions {n['completion']} tokens{turns} ({n['source']})"
    return text


def check_fits(cfg: RlexpConfig, lengths: Lengths | None = None) -> dict[str, Any]:
    """The estimate; raises ConfigError with the numbers when the total exceeds the chip's memory."""
    est = estimate_memory(cfg, lengths)
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
