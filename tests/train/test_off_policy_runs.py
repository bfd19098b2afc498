"""Bounded staleness (`trainer.off_policy.max_staleness`) through the user's command: the default task learns with
batches sampled ahead, the staleness metrics show the bound held at every step, a thread on rollout devices of
their own samples the same batches as the colocated queue, SIGTERM and resume equal an uninterrupted run, and the
mismatch correction weighs a stale batch against the weights that train on it. (k = 0 is the pinned default run:
tests/train/test_pinned_metrics.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import SHORT, run_rlexp, sigterm_at_progress
from tests.resume import SIGTERM_REWARD, sigterm_then_resume, train_steps, untimed
from tests.train.test_training_e2e import records, run

pytestmark = pytest.mark.slow

TRAINED = ("rewards/sum", "loss", "kl", "grad_norm", "completions/mean_length")


def rows(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}


def same_training(a: dict[int, dict], b: dict[int, dict], steps: range) -> None:
    for step in steps:
        for name in (*TRAINED, "off_policy/staleness_max"):
            assert name in a[step] and name in b[step], (step, name)
            assert a[step][name] == pytest.approx(b[step][name], rel=1e-5, abs=1e-7), (step, name)


@pytest.mark.parametrize("k", [1, 2])
def test_the_default_task_learns_with_batches_sampled_ahead(k: int, tmp_path: Path) -> None:
    """The user's command on the default task (300 steps). Measured, seed 0: pass@1 0.188 -> 0.406 at k=1,
    0.188 -> 0.400 at k=2 (on-policy: 0.188 -> 0.406)."""
    proc = run_rlexp(f"trainer.off_policy.max_staleness={k}", "logger=none", f"output_dir={tmp_path}",
                     f"hydra.run.dir={tmp_path / 'hydra'}", timeout=1500)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["plan"]["off_policy"]["max_staleness"] == k
    gain = summary["eval"]["after"]["pass_at_1"] - summary["eval"]["before"]["pass_at_1"]
    assert gain >= 0.15, summary["eval"]
    by_step = rows(tmp_path)
    for step in range(1, 301):  # the bound held at every step: the batch of step t sampled at max(0, t - 1 - k)
        r = by_step[step]
        assert r["off_policy/staleness_max"] == r["off_policy/staleness_mean"] == min(step - 1, k), step
        assert r["perf/trainer_wait_sec"] >= 0 and r["perf/rollout_wait_sec"] >= 0
    versions = {(s["step"], s["policy_version"]) for s in records(tmp_path, "samples.jsonl")}
    assert versions and all(v == max(0, step - 1 - k) for step, v in versions)


def test_a_thread_on_rollout_devices_samples_what_the_colocated_queue_samples(tmp_path: Path) -> None:
    """2 trainer + 2 rollout CPU devices, a mid-run eval (the thread pauses, the engine samples with the trainer's
    weights), SIGTERMed mid-way (the rollout threads sampling ahead) and resumed: the same batches, losses and evals
    as the uninterrupted colocated run, to float rounding (measured over 300 steps too, uninterrupted)."""
    common = [*SHORT, "trainer.off_policy.max_staleness=1", "trainer.max_steps=12", "trainer.eval_every=6"]
    common += ["trainer.checkpoint_every=6", "logger=none"]
    colocated, apart = tmp_path / "colocated", tmp_path / "apart"
    run(colocated, common)  # in-process, as `python -m rlexp` runs it; the thread's runs below are the command
    devices = ["slice=cpu-4", "slice.rollout_devices=2", f"hydra.run.dir={tmp_path / 'hydra'}"]
    code, rest = sigterm_at_progress(*common, *devices, f"output_dir={apart}", step_line="rlexp: step 4/12")
    assert code == 1 and "checkpoint saved; rerun the same command to resume" in rest, rest[-3000:]
    (checkpoint,) = [int(d.name) for d in (apart / "checkpoints" / "actor").iterdir() if d.name.isdigit()]
    assert 4 <= checkpoint < 12 and (apart / "checkpoints" / "off_policy" / f"{checkpoint}.pkl").is_file()
    proc = run_rlexp(*common, *devices, f"output_dir={apart}", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(train_steps(apart)) == list(range(1, 13))
    same_training(train_steps(apart), train_steps(colocated), range(1, 13))
    assert records(apart, "samples.jsonl") == records(colocated, "samples.jsonl")
    b = rows(apart)
    assert all("perf/rollout_time_sec" in b[s] for s in range(1, 13))  # the thread times its own batches
    evals = [json.loads((d / "evals.json").read_text()) for d in (colocated, apart)]
    for label in ("before", "6", "after"):
        assert untimed(evals[0][label]) == pytest.approx(untimed(evals[1][label])), label
    summary = json.loads((apart / "summary.json").read_text())
    assert summary["plan"]["off_policy"]["concurrent"] is True
    assert summary["plan"]["off_policy"]["pipelined_scoring"] is True  # two threads: scoring beside generation
    assert summary["plan"]["memory"]["off_policy_staged_weights"] > 0


def test_sigterm_and_resume_equal_an_uninterrupted_run_at_staleness_1(tmp_path: Path) -> None:
    """SIGTERM while the batch of step 5 is sampled (during step 4, k=1): checkpoint 3 stores the batch of step 4,
    sampled before it; the resumed run trains on it and samples on from there as the uninterrupted run did."""
    overrides = [
        *SHORT,
        "trainer.off_policy.max_staleness=1",
        "trainer.max_steps=12",
        "trainer.eval_every=3",
        "trainer.checkpoint_every=6",
        "reward.functions=[{fn: arith_correct}, {fn: arith_format, weight: 0.1}, " + SIGTERM_REWARD + "]",
    ]

    def queued(interrupted: Path) -> None:
        assert (interrupted / "checkpoints" / "off_policy" / "3.pkl").is_file()

    # the 5th rollout: step 5's batch, sampled when step 4 asks for its own
    full, interrupted = sigterm_then_resume(lambda d: run(d, overrides), tmp_path, 5, 3, queued)
    resumed, reference = train_steps(interrupted), train_steps(full)
    assert sorted(resumed) == sorted(reference) == list(range(1, 13))
    same_training(resumed, reference, range(1, 13))
    assert records(interrupted, "samples.jsonl") == records(full, "samples.jsonl")
    after = [json.loads((d / "summary.json").read_text())["eval"]["after"] for d in (interrupted, full)]
    assert untimed(after[0]) == pytest.approx(untimed(after[1]))
    plan = json.loads((interrupted / "summary.json").read_text())["plan"]
    assert plan["resume_step"] == 3 and plan["off_policy"]["resume_queue"].endswith("off_policy/3.pkl")


def test_the_correction_weighs_a_stale_batch_against_the_weights_that_train_on_it(tmp_path: Path) -> None:
    """With trainer.correction the trainer scores each batch when its step trains on it: at k=1 from step 3 on
    (step 1's update moves nothing: the learning rate warms up from 0) pi_trainer is a step newer than the sampler,
    and the logged mismatch shows it. Measured: mean |d log p| over steps 3-10 0.055 at k=1, 0.010 at k=0."""
    mismatch = {}
    for k in (0, 1):
        run_dir = tmp_path / f"k{k}"
        # 10 steps, in-process as `python -m rlexp` runs them (the command itself: the tests above); 16 x 4 eval
        # samples: the sampled evals run the rollout's 64-row programs
        steps = [*SHORT, "trainer.max_steps=10", "trainer.eval_every=10", "trainer.checkpoint_every=10"]
        steps += ["trainer.eval_samples=4"]
        run(run_dir, [*steps, f"trainer.off_policy.max_staleness={k}", "trainer.correction.mode=tis_token"])
        by_step = rows(run_dir)
        mismatch[k] = [by_step[s]["mismatch/logprob_abs_diff_mean"] for s in range(3, 11)]
        assert all(by_step[s]["correction/is_ratio_max"] > 0 for s in range(1, 11))
    assert sum(mismatch[1]) > 2 * sum(mismatch[0]), mismatch
