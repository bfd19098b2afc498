"""The rollout-trainer mismatch correction (`trainer.correction.*`, rlexp.algorithms.correction).

The table test fixes two sequences' log-probabilities and writes out, by hand, the ratio, weight, mask and metrics
each mode must give (the definitions of docs/algorithms.md: verl's decoupled token and sequence levels, the
sequence ratio a product). The run tests train through `python -m rlexp`: a rollout whose weights are bfloat16
beside a float32 trainer logs a mismatch ~10^4 times the float32 rollout's, and the correction's metrics show it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rlexp.algorithms.correction import correct, padded_rows
from tests.helpers import compose_conf, run_rlexp

LN = math.log
# two sequences of three token places; the second ends after two tokens (its third place is padding, with
# log-probabilities that must count nowhere)
SAMPLER = np.array([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.0]])
RATIOS = [[3.0, 0.25, 1.0], [1.5, 1.2, None]]  # pi_trainer / pi_sampler per token, written out
TRAINER = SAMPLER + np.array([[LN(3.0), LN(0.25), 0.0], [LN(1.5), LN(1.2), -4.0]])
MASK = np.array([[True, True, True], [True, True, False]])

# |log ratio| and rho - 1 - log rho of the five completion tokens, by hand
ABS_DIFF = (LN(3) + LN(4) + 0 + LN(1.5) + LN(1.2)) / 5
K3 = ((3 - 1 - LN(3)) + (0.25 - 1 - LN(0.25)) + 0 + (1.5 - 1 - LN(1.5)) + (1.2 - 1 - LN(1.2))) / 5

# mode, cap -> weights, mask, ratio mean, ratio max, truncated share, masked share
TABLE = {
    # token ratios 3, .25, 1 | 1.5, 1.2: only 3 is above C=2
    ("tis_token", 2.0): ([[2.0, 0.25, 1.0], [1.5, 1.2, 0.0]], MASK, 6.95 / 5, 3.0, 1 / 5, 0.0),
    # sequence ratios: 3 x .25 x 1 = .75, 1.5 x 1.2 = 1.8, both under C=2 (1.8 truncated at C=1.5)
    ("tis_sequence", 2.0): ([[0.75] * 3, [1.8, 1.8, 0.0]], MASK, (0.75 + 1.8) / 2, 1.8, 0.0, 0.0),
    ("tis_sequence", 1.5): ([[0.75] * 3, [1.5, 1.5, 0.0]], MASK, (0.75 + 1.8) / 2, 1.8, 1 / 2, 0.0),
    # token band [1/2, 2]: 3 and .25 are out (dropped), 1, 1.5 and 1.2 keep their ratio as weight
    ("mis_token", 2.0): (
        [[0.0, 0.0, 1.0], [1.5, 1.2, 0.0]],
        [[False, False, True], [True, True, False]],
        6.95 / 5,
        3.0,
        0.0,
        2 / 5,
    ),
    # sequence band [2/3, 3/2]: .75 is in, 1.8 is out: the whole second sequence leaves the loss
    ("mis_sequence", 1.5): (
        [[0.75] * 3, [0.0, 0.0, 0.0]],
        [[True, True, True], [False, False, False]],
        (0.75 + 1.8) / 2,
        1.8,
        0.0,
        1 / 2,
    ),
    ("mis_sequence", 2.0): ([[0.75] * 3, [1.8, 1.8, 0.0]], MASK, (0.75 + 1.8) / 2, 1.8, 0.0, 0.0),
}


@pytest.mark.parametrize(("mode", "cap"), list(TABLE), ids=[f"{m}-C{c:g}" for m, c in TABLE])
def test_weights_masks_and_metrics_equal_the_hand_computation(mode: str, cap: float) -> None:
    weights, mask, mean, top, truncated, masked = TABLE[(mode, cap)]
    c = correct(TRAINER, SAMPLER, MASK, mode, cap)
    np.testing.assert_allclose(c.weights, np.array(weights), rtol=1e-6)
    assert c.weights.dtype == np.float32
    np.testing.assert_array_equal(c.mask, np.array(mask))
    expected = {
        "correction/is_ratio_mean": mean,
        "correction/is_ratio_max": top,
        "correction/truncated_share": truncated,
        "correction/masked_share": masked,
        "mismatch/logprob_abs_diff_mean": ABS_DIFF,
        "mismatch/kl": K3,
    }
    assert c.metrics == pytest.approx(expected, rel=1e-9)


def test_no_mismatch_weighs_every_token_one() -> None:
    for mode in ("tis_token", "tis_sequence", "mis_token", "mis_sequence"):
        c = correct(SAMPLER, SAMPLER, MASK, mode, 2.0)
        np.testing.assert_array_equal(c.weights, MASK.astype(np.float32))
        np.testing.assert_array_equal(c.mask, MASK)
        assert c.metrics["mismatch/kl"] == 0.0 == c.metrics["mismatch/logprob_abs_diff_mean"]


def test_a_long_sequence_s_product_stays_finite() -> None:
    # 100 tokens each 0.5 nat above the sampler's: exp(50) is clamped at exp(20), truncated to C, or masked
    sampler = np.zeros((1, 100))
    c = correct(sampler + 0.5, sampler, np.ones((1, 100), bool), "tis_sequence", 2.0)
    assert c.metrics["correction/is_ratio_max"] == pytest.approx(math.exp(20)) and np.all(c.weights == 2.0)
    assert not correct(sampler + 0.5, sampler, np.ones((1, 100), bool), "mis_sequence", 2.0).mask.any()


def test_sampler_rows_pad_to_the_completion_width() -> None:
    rows = padded_rows([[-0.5, -1.0], [], [-0.1, -0.2, -0.3, -0.4, -0.5]], 4)
    np.testing.assert_array_equal(rows, np.array([[-0.5, -1.0, 0, 0], [0, 0, 0, 0], [-0.1, -0.2, -0.3, -0.4]], "f4"))


def test_the_rollout_asks_for_log_probabilities_only_when_correcting() -> None:
    from rlexp.train.cluster import rollout_config

    class Tok:  # rollout_config reads the tokenizer's EOS id only
        eos_token_id = 2

    assert not rollout_config(compose_conf([]), Tok()).return_logprobs
    assert rollout_config(compose_conf(["trainer.correction.mode=mis_token"]), Tok()).return_logprobs
    rc = rollout_config(
        compose_conf(["slice=cpu-4", "slice.rollout_devices=2", "trainer.rollout.dtype=bfloat16"]), Tok()
    )
    assert rc.data_type is not None and str(np.dtype(rc.data_type)) == "bfloat16"


RUN = [
    "slice=cpu-4",
    "slice.rollout_devices=2",
    "trainer.max_steps=2",
    "trainer.eval_every=100",
    "trainer.checkpoint_every=100",
    "trainer.eval_prompts=16",
    "trainer.eval_samples=2",
    "logger=none",
    "trainer.correction.mode=tis_token",
    "trainer.correction.cap=1.001",
]


def _first_step(tmp_path: Path, dtype: str) -> dict:
    run_dir = tmp_path / dtype
    proc = run_rlexp(*RUN, f"trainer.rollout.dtype={dtype}", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in rows if r.get("step") == 1)


@pytest.mark.slow  # two 2-step runs on 2 + 2 CPU devices: ~40 s
def test_a_bfloat16_rollout_beside_a_float32_trainer_logs_the_mismatch_it_corrects(tmp_path: Path) -> None:
    """Step 1 samples with the initial weights in both runs: the same policy, so what differs between them is the
    rollout's dtype alone. Measured on a 2-core x86: float32 |diff| 2.5e-7, bfloat16 2.6e-3."""
    f32, bf16 = _first_step(tmp_path, "float32"), _first_step(tmp_path, "bfloat16")
    assert f32["mismatch/logprob_abs_diff_mean"] < 1e-5, f32
    assert bf16["mismatch/logprob_abs_diff_mean"] > 100 * max(f32["mismatch/logprob_abs_diff_mean"], 1e-7), bf16
    assert bf16["mismatch/kl"] > 0 and bf16["mismatch/kl"] > 100 * f32["mismatch/kl"]
    # the ratios leave 1 by what the log-probabilities moved: the weights truncate at C = 1.001 in bf16 only
    assert bf16["correction/is_ratio_max"] > 1.001 > f32["correction/is_ratio_max"]
    assert bf16["correction/truncated_share"] > 0 == f32["correction/truncated_share"]
    assert bf16["correction/masked_share"] == 0 == f32["correction/masked_share"]
    spread = abs(bf16["correction/is_ratio_mean"] - 1)
    assert spread <= bf16["mismatch/logprob_abs_diff_mean"] * 1.01  # |E[rho] - 1| <~ E|log rho| for small diffs
