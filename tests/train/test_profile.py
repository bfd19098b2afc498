"""`python -m rlexp profile.steps=N`: a JAX profiler trace of N training steps in the run dir (rlexp.train.profile).

The trace is read back: its Chrome-format twin (`*.trace.json.gz`, written beside the xplane) must hold exactly
N executions of the train step and N rollouts, the steps after `profile.skip_steps`.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import jax
import pytest

from rlexp.train.profile import install_profiler, stop_open_trace
from tests.helpers import REPO, SHORT, compose_conf, run_rlexp, sigterm_at_progress


def _rlexp(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_rlexp(*args, cwd=cwd)


def _executions(trace: dict, program: str) -> int:
    """Runs of a jitted function: JAX records each call twice (Python and C++ event), at the same moment."""
    starts = sorted(
        e["ts"] for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == f"PjitFunction({program})"
    )
    return sum(1 for i, t in enumerate(starts) if i == 0 or t - starts[i - 1] > 1000)  # µs


@pytest.mark.slow
def test_profile_steps_traces_that_many_steps_into_the_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = _rlexp("profile.steps=2", "profile.skip_steps=5", *SHORT, f"hydra.run.dir={run_dir}", cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["profile"] == str(run_dir / "profile")
    assert f"profile   {run_dir / 'profile'}" in out.stderr  # the end-of-run lines say where it is
    (session,) = (run_dir / "profile" / "plugins" / "profile").iterdir()
    assert [p.stat().st_size > 100_000 for p in session.glob("*.xplane.pb")] == [True]
    (chrome,) = session.glob("*.trace.json.gz")
    trace = json.loads(gzip.decompress(chrome.read_bytes()))
    assert _executions(trace, "_train_step") == 2
    assert _executions(trace, "_decode_fn") == 2  # the rollout before each traced update (no eval inside)
    # the rest of the run is as without a trace
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum("loss" in r for r in rows) == 8


@pytest.mark.slow
def test_a_run_stopped_before_its_window_claims_no_trace_and_resumes_past_it(tmp_path: Path) -> None:
    """SIGTERM before the traced steps: no trace, and summary.json says none. The resumed run has fewer steps left
    than skip_steps (counted from the resume, whose first step compiles again): it says so and trains to the end."""
    run_dir = tmp_path / "run"
    args = ["trainer.max_steps=30", "trainer.eval_every=30", "trainer.checkpoint_every=30", "trainer.eval_prompts=16"]
    args += ["logger=none", "profile.steps=2", "profile.skip_steps=28"]
    args += [f"hydra.run.dir={run_dir}"]
    code, rest = sigterm_at_progress(*args, step_line="rlexp: step 3/30")  # the window is steps 29-30
    assert code == 1, rest[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["profile"] is None
    assert not (run_dir / "profile").exists() and "profile   " not in rest
    stopped = summary["train"]["steps"]
    resumed = _rlexp(*args, cwd=REPO)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"profile.skip_steps=28: {30 - stopped} steps left after resuming at step {stopped}; no trace taken" in (
        resumed.stderr
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 30 and summary["profile"] is None


def test_no_profile_by_default(tmp_path: Path) -> None:
    conf = compose_conf([])
    assert conf.profile.steps == 0
    trainer = SimpleNamespace(train_steps=0, _iter_steps=0)
    assert install_profiler(trainer, conf, str(tmp_path)) is None and not hasattr(trainer, "_prof")


def test_a_trace_that_cannot_start_is_refused_before_anything_runs(tmp_path: Path) -> None:
    out = _rlexp("profile.steps=2", "profile.skip_steps=8", *SHORT, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    errors = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert errors[0].startswith("rlexp: error: profile.skip_steps=8: the trace would start after the run's last step")
    assert not any((tmp_path / "run").rglob("*"))  # Hydra makes the run dir; nothing is written in it


@pytest.mark.parametrize(
    ("overrides", "restored", "window"),
    [
        (["profile.steps=2", "profile.skip_steps=1"], 0, (1, 3)),
        (["profile.steps=2", "profile.skip_steps=1"], 4, (5, 7)),  # counted from the restored step
        (["profile.steps=5", "profile.skip_steps=1"], 4, (5, 10)),  # cut at the last step (max_steps=10)
        # 4 micro-batches per step: Tunix's profiler counts micro-batch iterations
        (["profile.steps=2", "profile.skip_steps=1", "trainer.micro_batch_size=2"], 1, (8, 16)),
    ],
)
def test_the_window_in_tunix_iterations(overrides: list[str], restored: int, window: tuple[int, int]) -> None:
    conf = compose_conf([*overrides, "trainer.max_steps=10", "trainer.eval_every=5", "trainer.checkpoint_every=5"])
    per_step = 4 if conf.trainer.micro_batch_size else 1
    trainer = SimpleNamespace(train_steps=restored, _iter_steps=restored * per_step)
    assert install_profiler(trainer, conf, "/runs/a") == "/runs/a/profile"
    assert (trainer._prof._first_profile_step, trainer._prof._last_profile_step) == window


def test_a_resume_past_the_window_trains_without_a_trace(capsys: pytest.CaptureFixture) -> None:
    """Tunix's profiler raises in the trainer's constructor when the window starts after the last step; a run
    resumed near its end still has to train."""
    conf = compose_conf(["profile.steps=2", "profile.skip_steps=3", "trainer.max_steps=10"])
    trainer = SimpleNamespace(train_steps=8, _iter_steps=8)
    assert install_profiler(trainer, conf, "/runs/a") is None and not hasattr(trainer, "_prof")
    assert "profile.skip_steps=3: 2 steps left after resuming at step 8; no trace taken" in capsys.readouterr().err


def test_a_trace_left_open_is_written_when_training_stops(tmp_path: Path) -> None:
    from tunix.sft.profiler import Profiler

    assert stop_open_trace() is False
    jax.profiler.start_trace(str(tmp_path))
    Profiler._is_active = True  # as Tunix's profiler leaves it when training stops inside the window
    jax.numpy.ones(3).block_until_ready()
    assert stop_open_trace() is True and Profiler._is_active is False
    assert list(tmp_path.glob("plugins/profile/*/*.xplane.pb"))
