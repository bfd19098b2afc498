"""GRPO steps through `python -m rlexp model=… model.path=…` for the architectures beyond Qwen3.

Tiny random gpt-oss (MoE, sinks, sliding window, YaRN) and gemma4 (per-layer embeddings, KV
sharing) checkpoints in Hugging Face layout, written by rlexp.models.tiny_random, with the
builtin character tokenizer. Random weights do not learn arithmetic; these runs prove that the
models plug into Tunix's sampler, learner and checkpoints exactly like the builtin one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.models.tiny_random import write
from tests.helpers import SHORT, run_rlexp

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("family", "extra"),
    [
        ("gpt_oss", []),
        ("gemma4", []),
        # Each failed before: bf16 compute with LoRA at the first rollout (gemma4: the KV cache refused the
        # adapters' float32 k/v; gpt-oss: k and v got no adapter); LoRA under remat ("matched no projection");
        # gpt-oss's remat inside the sampler's while_loop (TraceContextError), with or without LoRA.
        ("gemma4", ["model.dtype=bfloat16", "trainer.lora.rank=4", "model.remat=full"]),
        ("gpt_oss", ["model.dtype=bfloat16", "trainer.lora.rank=4", "model.remat=full"]),
    ],
    ids=["gpt_oss", "gemma4", "gemma4_bf16_lora_remat", "gpt_oss_bf16_lora_remat"],
)
def test_three_grpo_steps(family: str, extra: list[str], tmp_path: Path) -> None:
    ckpt = write(family, tmp_path / "ckpt")  # random weights + the builtin character tokenizer
    run_dir = tmp_path / "run"
    args = [
        f"model={family}_tiny",
        f"model.path={ckpt}",
        *SHORT,
        "trainer.max_steps=3",
        "trainer.eval_every=3",
        "trainer.checkpoint_every=3",
        # 8 prompts x 8 samples: the sampled evals are the training rollout's 64 rows and run its compiled
        # programs (rlexp.train.evaluate.sample_in_chunks); 8 x 1 compiled a prefill and decode pair of their own
        "trainer.eval_prompts=8",
        "trainer.eval_samples=8",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    out = run_rlexp(*args, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 3
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if "rewards/sum" in r] == [1, 2, 3]
    assert all(r["grad_norm"] > 0 for r in steps if "grad_norm" in r)
    assert (run_dir / "checkpoints" / "actor" / "3").is_dir()
