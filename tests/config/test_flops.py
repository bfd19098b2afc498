"""Model FLOPs of a step and the slice's peak: the numbers behind `perf/mfu` and `perf/tokens_per_sec`."""

from __future__ import annotations

import os

import pytest

from rlexp.config.hardware import CPU_PEAK_FLOPS_PER_CORE, peak_flops
from rlexp.estimates.flops import MFU, STEP_TFLOPS, TOKENS_PER_SEC, forward_flops_per_token, step_flops, step_rates
from rlexp.estimates.model_terms import active_params
from tests.helpers import compose_conf


def test_qwen3_0_6b_step_flops_are_pinned() -> None:
    cfg = compose_conf(["model=qwen3_0_6b", "slice=h200"])
    # Qwen3-0.6B's published 0.596 B weights: the tied embedding (151936 x 1024) is the LM head, so it counts
    assert active_params(cfg.model) == 596_049_920
    # 2 x weights + attention: 4 x 28 layers x 16 heads x 128 x (20 tokens / 2 attended)
    assert forward_flops_per_token(cfg.model, 20) == 2 * 596_049_920 + 4 * 28 * 16 * 128 * 10 == 1_194_393_600
    # 8 prompts x 8 generations x (16 prompt + 4 completion tokens); rollout + reference (beta 0.04) + 3 x update
    tokens, flops = step_flops(cfg, 4)
    assert tokens == 1280 and flops == 1280 * 5 * 1_194_393_600
    rates = step_rates(cfg, 2.0, 4)
    assert rates[TOKENS_PER_SEC] == 640.0
    assert rates[MFU] == pytest.approx(flops / 2.0 / 790e12)
    assert rates[STEP_TFLOPS] == pytest.approx(7.644119, rel=1e-6)


def test_no_reference_and_more_iterations_change_the_passes() -> None:
    base = compose_conf(["model=qwen3_0_6b"])
    no_ref = compose_conf(["model=qwen3_0_6b", "trainer.beta=0"])
    twice = compose_conf(["model=qwen3_0_6b", "trainer.num_iterations=2"])
    assert step_flops(no_ref, 4)[1] == pytest.approx(step_flops(base, 4)[1] * 4 / 5)
    assert step_flops(twice, 4)[1] == pytest.approx(step_flops(base, 4)[1] * 8 / 5)


def test_peaks_by_slice() -> None:
    assert peak_flops(compose_conf(["slice=h200"]).slice) == 790e12
    assert peak_flops(compose_conf(["slice=gpu-2x8xh200"]).slice) == 16 * 790e12
    assert peak_flops(compose_conf(["slice=v5p-32"]).slice) == 16 * 459e12
    assert peak_flops(compose_conf([]).slice) == CPU_PEAK_FLOPS_PER_CORE * os.cpu_count()


def test_unknown_completion_length_counts_the_cap_and_no_time_gives_nothing() -> None:
    cfg = compose_conf([])
    assert step_rates(cfg, 1.0, None) == step_rates(cfg, 1.0, cfg.trainer.max_completion_tokens)
    assert step_rates(cfg, 0.0, 3.0) == {}
