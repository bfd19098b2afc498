"""Rollout-trainer mismatch correction (`trainer.correction.*`): importance weights from the sampler's own
per-token log-probabilities to the trainer's, on the loss of every GRPO-family algorithm.

The rollout engine samples with its own numerics (bf16 weights, vLLM's kernels, another sharding), so the policy
that produced a completion, pi_sampler, is not the trainer's pi_old even at the same weights: training on the
samples as if they were pi_old's is off-policy (Yao et al. 2025, "Your efficient RL framework secretly brings you
off-policy RL training"). With the ratio rho_t = pi_old(y_t) / pi_sampler(y_t) on each sampled token, verl's
"decoupled" form (docs/algo/rollout_corr_math.md) keeps PPO's clipped ratio against pi_old and multiplies each
token's loss by a weight w (detached):

- `tis_token`: w_t = min(rho_t, C) (truncated IS, Yao et al.);
- `tis_sequence`: w = min(prod_t rho_t, C) for every token of the sequence (the product, verl's `sequence`
  level; not the geometric mean);
- `mis_token`: w_t = rho_t if 1/C <= rho_t <= C, else the token is dropped from the loss (masked IS, Liu et al.
  2025, "When speed kills stability"; verl's token rejection with the reciprocal lower bound);
- `mis_sequence`: w = prod_t rho_t for a sequence whose product is in [1/C, C], else the whole sequence is dropped.

A dropped token leaves the loss mask (it counts in neither the sum nor the token count of the aggregation), as
verl's rejection does. Log-ratios are clamped to [-20, 20] before exp (so a long sequence's product stays finite).

`learner_correction` plugs it into a built learner through the Tunix seam: Tunix's GRPO loss already multiplies
each token's loss by `TrainExample.sampler_is_weights` before aggregating. Metrics (per step, over completion
tokens, or over sequences at the sequence level): `correction/is_ratio_mean`, `correction/is_ratio_max`,
`correction/truncated_share` (tis), `correction/masked_share` (mis), `mismatch/logprob_abs_diff_mean` (|log pi_old
- log pi_sampler|) and `mismatch/kl` (k3 of KL(pi_sampler || pi_old) on the sampled tokens: rho - 1 - log rho).
Pure numpy at import; JAX where a learner is wrapped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlexp.config.schema import RlexpConfig, TrainerConfig
from rlexp.errors import ConfigError, RunError

MODES = ("none", "tis_token", "tis_sequence", "mis_token", "mis_sequence")
LOG_RATIO_BOUND = 20.0  # as Tunix's GRPO loss bounds its own log-ratio


@dataclass(frozen=True)
class Correction:
    """One batch's correction: the per-token weights [B, T] (0 where a token is padding or dropped), the loss mask
    after dropping [B, T], and the step's metrics."""

    weights: np.ndarray
    mask: np.ndarray
    metrics: dict[str, float]


def enabled(t: TrainerConfig) -> bool:
    return t.correction.mode != "none"


def check_keys(t: TrainerConfig) -> None:
    """The values of trainer.correction.* (the algorithm registry's shared rules run it)."""
    c = t.correction
    if c.mode not in MODES:
        raise ConfigError("trainer.correction.mode", c.mode, f"use one of {', '.join(MODES)}")
    if not c.cap > 1 or not np.isfinite(c.cap):
        raise ConfigError(
            "trainer.correction.cap", c.cap, "use a finite number > 1 (C: weights truncate at C, masks keep [1/C, C])"
        )


def correct(trainer_logps: Any, sampler_logps: Any, mask: Any, mode: str, cap: float) -> Correction:
    """The weights, mask and metrics of `mode` with cap C=`cap` for a batch: per-token log-probabilities of the
    sampled tokens under the trainer (pi_old) and the sampler, and the completion mask, each [B, T]."""
    if mode not in MODES[1:]:
        raise ValueError(f"no correction for mode {mode!r}")
    m = np.asarray(mask).astype(bool)
    diff = np.where(m, np.asarray(trainer_logps, np.float64) - np.asarray(sampler_logps, np.float64), 0.0)
    log_rho = np.clip(diff, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    rho = np.exp(log_rho)
    tokens = max(int(m.sum()), 1)
    metrics = {
        "mismatch/logprob_abs_diff_mean": float(np.abs(diff).sum() / tokens),
        "mismatch/kl": float(np.where(m, rho - 1.0 - log_rho, 0.0).sum() / tokens),
    }
    level, kind = mode.split("_")[1], mode.split("_")[0]
    if level == "sequence":
        rows = m.any(axis=1)  # sequences with a completion token
        ratio = np.exp(np.clip(log_rho.sum(axis=1), -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
        units = rows
        per_token = np.broadcast_to(ratio[:, None], m.shape)
    else:
        ratio, units, per_token = rho, m, rho
    counted = ratio[units]
    n = max(counted.size, 1)
    metrics["correction/is_ratio_mean"] = float(counted.sum() / n)
    metrics["correction/is_ratio_max"] = float(counted.max()) if counted.size else 1.0
    if kind == "tis":
        weights = np.where(m, np.minimum(per_token, cap), 0.0)
        keep = m
        metrics["correction/truncated_share"] = float((counted > cap).sum() / n)
        metrics["correction/masked_share"] = 0.0
    else:
        inside = (ratio >= 1.0 / cap) & (ratio <= cap)
        keep_units = inside if level == "token" else np.broadcast_to(inside[:, None], m.shape)
        keep = m & keep_units
        weights = np.where(keep, per_token, 0.0)
        metrics["correction/truncated_share"] = 0.0
        metrics["correction/masked_share"] = float((~inside[units]).sum() / n)
    return Correction(weights.astype(np.float32), keep, metrics)


def padded_rows(rows: list[Any], width: int) -> np.ndarray:
    """The sampler's per-completion log-probabilities (one list or array per row, as long as its tokens) as [B,
    width], 0 past each row's end."""
    out = np.zeros((len(rows), width), np.float32)
    for i, row in enumerate(rows):
        values = np.asarray(row, np.float32)[:width]
        out[i, : len(values)] = values
    return out


def learner_correction(learner: Any, conf: RlexpConfig, metric_key: Callable[[str], str]) -> None:
    """Make `learner` (a Tunix GRPO-family learner) train with trainer.correction's weights: each rollout's example
    gets `sampler_is_weights` (and, masked IS, its dropped tokens out of `completion_mask`); with
    trainer.num_iterations > 1 its `old_per_token_logps` become the trainer's own (PPO's proximal policy, which
    Tunix took from the rollout model). Through the Tunix seam (rlexp.tunix.learners)."""
    import jax.numpy as jnp

    from rlexp.tunix.learners import Step, rewrite_examples

    t = conf.trainer
    micro_batch = t.micro_batch_size * t.num_generations if t.micro_batch_size else None

    def correct_example(example: Any, step: Step) -> Any:
        if not step.training:
            return example
        width = int(example.completion_ids.shape[1])
        rows = step.sampler_logprobs()
        if rows is None:
            raise RunError(
                f"trainer.correction.mode={t.correction.mode}: the rollout engine returned no log-probabilities; "
                "use trainer.rollout.engine=vanilla or trainer.correction.mode=none"
            )
        trainer = step.trainer_logprobs(example.prompt_ids, example.completion_ids, micro_batch)
        c = correct(trainer, padded_rows(rows, width), example.completion_mask, t.correction.mode, t.correction.cap)
        step.buffer({metric_key(k): (v, np.max if k.endswith("_max") else np.mean) for k, v in c.metrics.items()})
        changes: dict[str, Any] = {"sampler_is_weights": jnp.asarray(c.weights)}
        if t.correction.mode.startswith("mis"):
            changes["completion_mask"] = jnp.asarray(c.mask)
        if t.num_iterations > 1:
            changes["old_per_token_logps"] = trainer
        return example.replace(**changes)

    rewrite_examples(learner, correct_example)
