"""Model FLOPs of a GRPO step and the slice's peak: `perf/tokens_per_sec` and `perf/mfu` of every run.

A token's forward pass costs 2 x the weights it passes through (`model_terms.active_params`: the LM head counted, the
input lookups and unrouted experts not) plus attention's QK^T and AV products, 4 x layers x query heads x head_dim
x the positions it attends to (half the sequence on average: causal). A step processes batch_size x
num_generations sequences of max_prompt_tokens + the step's mean completion length: the rollout runs one forward
pass over them, the reference one more when the loss needs it (or the algorithm's own model in that role, OPD's
teacher, at its own size), the policy update fwd + bwd (3 x forward) per `num_iterations`, and what the algorithm's
spec adds (`extra_forward_passes`: PPO's old policy and critic). MFU = those FLOPs / step time / the slice's peak (`hardware.peak_flops`). Pure Python.
"""

from __future__ import annotations

from collections.abc import Callable

from rlexp.algorithms.registry import algorithm_of, extra_forward_passes
from rlexp.config.hardware import peak_flops
from rlexp.config.schema import ModelConfig, RlexpConfig
from rlexp.estimates.model_terms import active_params

TOKENS_PER_SEC = "perf/tokens_per_sec"
MFU = "perf/mfu"
STEP_TFLOPS = "perf/model_tflops_per_step"


def forward_flops_per_token(m: ModelConfig, seq_len: float) -> float:
    """FLOPs of one token's forward pass in a sequence of `seq_len` tokens (causal: it attends to seq_len / 2)."""
    return _per_token(m, active_params(m), seq_len)


def _per_token(m: ModelConfig, active: float, seq_len: float) -> float:
    return 2.0 * active + 4.0 * m.num_layers * m.num_heads * m.head_dim * seq_len / 2


def passes_per_token(cfg: RlexpConfig) -> float:
    """Forward-pass equivalents of the policy a step spends on each token: rollout 1, reference 1 (if used), update 3
    each iteration, and the algorithm's own and trainer.correction's (registry's `extra_forward_passes`)."""
    t = cfg.trainer
    spec = algorithm_of(t)
    return 1.0 + (1.0 if spec.needs_reference(t) else 0.0) + 3.0 * t.num_iterations + extra_forward_passes(t)


def step_flops(cfg: RlexpConfig, completion_tokens: float) -> tuple[float, float]:
    """(tokens, model FLOPs) of one step whose completions average `completion_tokens` tokens."""
    return _flops_of(cfg)(completion_tokens)


def _flops_of(cfg: RlexpConfig) -> Callable[[float], tuple[float, float]]:
    """`step_flops` of `cfg` with what does not change between steps read once: the algorithm's own reference-role
    model (OPD's teacher: a run dir's recorded config, composed again by Hydra, took half of a tiny distillation's
    time), the passes and each model's active parameters (registry module scans: ~2 % of a tiny run each step)."""
    t = cfg.trainer
    own = algorithm_of(t).reference_model(cfg)  # OPD's teacher: one forward at its own size
    passes, active = passes_per_token(cfg), active_params(cfg.model)
    own_active = active_params(own) if own is not None else 0.0

    def flops(completion_tokens: float) -> tuple[float, float]:
        seq_len = t.max_prompt_tokens + completion_tokens
        tokens = t.batch_size * t.num_generations * seq_len
        extra = _per_token(own, own_active, seq_len) if own is not None else 0.0
        return tokens, tokens * (passes * _per_token(cfg.model, active, seq_len) + extra)

    return flops


def step_rates(cfg: RlexpConfig, step_seconds: float, completion_tokens: float | None) -> dict[str, float]:
    """`perf/tokens_per_sec`, `perf/mfu` and the step's model TFLOPs; completions at their cap when unknown."""
    return rates_of(cfg)(step_seconds, completion_tokens)


def rates_of(cfg: RlexpConfig) -> Callable[[float, float | None], dict[str, float]]:
    """`step_rates` of `cfg` for every step of a run, its constants read once (`_flops_of`)."""
    step, peak = _flops_of(cfg), peak_flops(cfg.slice)

    def rates(step_seconds: float, completion_tokens: float | None) -> dict[str, float]:
        if step_seconds <= 0:
            return {}
        tokens, flops = step(cfg.trainer.max_completion_tokens if completion_tokens is None else completion_tokens)
        return {TOKENS_PER_SEC: tokens / step_seconds, MFU: flops / step_seconds / peak, STEP_TFLOPS: flops / 1e12}

    return rates
