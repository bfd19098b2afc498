"""Pinned numbers of the default run: `python -m rlexp` with seed 0 is deterministic on a CPU, so a change that
alters training (sampling, advantages, loss, optimizer, data order, evals) shows up here as drift.

The run is the default configuration cut to 3 steps (eval before and after on 16 prompts). When a change
alters the numbers on purpose, re-measure them with the command below and say why in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_rlexp

COMMAND = [
    "trainer.max_steps=3",
    "trainer.eval_every=3",
    "trainer.checkpoint_every=3",
    "trainer.eval_prompts=16",
    "trainer.eval_samples=2",
    "logger=none",
]
# step -> metric -> value, measured on this kind of machine (2-core x86-64, jax 0.10.2, tunix 0.1.7). Re-pinned
# when prompts were padded to the run's longest prompt instead of max_prompt_tokens (the sampler's key depends on
# the decoding position), and when trainer.max_completion_tokens went 8 -> 4 (the same first four tokens are
# sampled; completions that ran past four are cut, which moves rewards, lengths and the losses from step 1), and
# when GRPO's KL became the paper's k3 estimator (trainer.kl_estimator; was Tunix's log pi - log pi_ref): the same
# step-1 rollout and evals, kl >= 0 and the losses and updates from step 1 on moved.
PINNED = {
    0: {"eval/greedy_accuracy": 0.4375, "eval/pass_at_1": 0.28125},
    1: {  # loss and kl ~0 by construction (policy = reference, advantages sum to 0 per group); tolerance-wide
        "loss": 2.3283064365386963e-09,
        "kl": 0.0,
        "grad_norm": 2.02239990234375,
        "rewards/sum": 0.2515625,
        "completions/mean_length": 2.078125,
    },
    2: {
        "loss": -0.014242307282984257,
        "kl": 0.016945626586675644,
        "grad_norm": 2.301704168319702,
        "rewards/sum": 0.440625,
        "completions/mean_length": 1.96875,
    },
    3: {
        "loss": -0.038232993334531784,
        "kl": 0.01751437410712242,
        "grad_norm": 2.402097463607788,
        "rewards/sum": 0.2921875,
        "completions/mean_length": 2.09375,
        "eval/greedy_accuracy": 0.625,
        "eval/pass_at_1": 0.28125,
    },
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "tolerance"),
    [
        # The same run on the two x86 CPUs this kind of machine comes with (AVX2; AVX-512 with BF16) differs in
        # float32 summation order: XLA:CPU's dot library picks its kernels for the CPU it runs on. Measured
        # between them: grad_norm 6.5e-7 relative (1.7e-6 absolute at step 3), kl 9e-8 absolute; sampled
        # tokens, rewards, lengths and evals identical. A change to the math moves these by 1e-4 and more.
        ([], 1e-5),
        # Recomputing each decoder layer in the backward pass changes XLA's fusions, not the math: the same
        # numbers to float32 rounding (measured: grad_norm within 7e-7). It also samples under remat.
        (["model.remat=full"], 1e-5),
    ],
    ids=["default", "remat_full"],
)
def test_default_run_metrics_are_pinned(extra: list[str], tolerance: float, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_rlexp(*COMMAND, *extra, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    drift = [
        f"step {step} {key}: {rows.get(step, {}).get(key)} != pinned {value}"
        for step, metrics in PINNED.items()
        for key, value in metrics.items()
        if rows.get(step, {}).get(key) is None or abs(rows[step][key] - value) > tolerance * max(1.0, abs(value))
    ]
    assert not drift, "\n".join(drift)
    # trainer.off_policy.max_staleness=0 (the default) installs nothing: no queue, no metric of its own
    assert not [k for r in rows.values() for k in r if k.startswith("off_policy/")]
    # saves and evals are timed on their own, on the steps that saved and were evaluated (rlexp.train.stepclock)
    assert [s for s in sorted(rows) if "perf/checkpoint_time_sec" in rows[s]] == [3]
    assert [s for s in sorted(rows) if "perf/eval_time_sec" in rows[s]] == [0, 3]
    # every step reports its throughput and MFU from the model's FLOPs (rlexp.estimates.flops), on a CPU too
    steps = [rows[s] for s in (1, 2, 3)]
    assert all(r["perf/tokens_per_sec"] > 0 and 0 < r["perf/mfu"] < 1 for r in steps), steps
    tokens = [r["perf/tokens_per_sec"] * r["perf/step_time_sec"] / 64 - 16 for r in steps]
    assert tokens == pytest.approx([r["completions/mean_length"] for r in steps])  # 8 x 8 rows of 16 + completion
