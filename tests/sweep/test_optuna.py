"""The optuna_lr preset runs real trials of the tiny default and records them in sweep.json (two trials: each
trains a job, and two already show distinct suggestions, every state and the best value)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from tests.helpers import SHORT, run_rlexp
from tests.sweep.helpers import env, read

pytestmark = pytest.mark.slow


def test_optuna_preset_runs_real_trials(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "optuna"
    cmd = ["+sweep=optuna_lr", "hydra.sweeper.n_trials=2", *SHORT]
    done = run_rlexp(*cmd, f"hydra.sweep.dir={sweep_dir}", env=env(), timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    data = read(sweep_dir / "sweep.json")
    assert data["sweeper"] == "optuna" and data["swept_keys"] == ["trainer.learning_rate"]
    assert [j["state"] for j in data["jobs"]] == ["completed"] * 2
    rates = [float(j["overrides"][0].split("=")[1]) for j in data["jobs"]]
    assert all(1e-4 <= r <= 1e-2 for r in rates) and len(set(rates)) == 2
    objectives = [j["objective"] for j in data["jobs"]]
    assert all(isinstance(v, float) and math.isfinite(v) for v in objectives)
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert results["best_value"] == pytest.approx(max(objectives))  # the preset maximises pass@1
    assert (sweep_dir / "report.html").exists()
