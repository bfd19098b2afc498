"""`python -m rlexp model.dtype=bfloat16`: bf16 compute over float32 weights trains end to end on CPU, with and
without LoRA.

The projections then multiply through rlexp.perf.bf16_gemm.matmul_f32_accumulate (tested there against
Tunix's bf16 values); this runs the user's command through the sampler, the learner and a checkpoint.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.helpers import SHORT, run_rlexp


@pytest.mark.slow
@pytest.mark.parametrize("lora", [[], ["trainer.lora.rank=4"]], ids=["full", "lora"])
def test_a_bfloat16_run_trains_and_checkpoints(lora: list[str], tmp_path: Path) -> None:
    """With LoRA this failed at the first rollout before (the bf16 KV cache refused the adapters' float32
    projections), and `model.dtype=bfloat16` is every hub model option's default."""
    run_dir = tmp_path / "run"
    # 16 prompts x 4 samples: the sampled evals run the training rollout's bf16 programs (64 rows) instead of
    # compiling a pair of their own (rlexp.train.evaluate.sample_in_chunks)
    args = ["model.dtype=bfloat16", *lora, *SHORT, "trainer.eval_samples=4", f"hydra.run.dir={run_dir}"]
    out = run_rlexp(*args)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 8
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 8 and all(math.isfinite(v) for v in losses), losses
    assert all(r["grad_norm"] > 0 for r in rows if "grad_norm" in r)
    assert (run_dir / "checkpoints" / "actor" / "8").is_dir()
    # the weights stay float32: the checkpoint's config records the compute dtype alone as bf16
    assert "dtype: bfloat16" in (run_dir / "config.yaml").read_text()
    assert "param_dtype: float32" in (run_dir / "config.yaml").read_text()
