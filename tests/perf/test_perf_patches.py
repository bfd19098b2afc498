"""`perf.patches` as a user types it: the default applies every patch and records them; `perf.patches=[]` runs
Tunix's own code (other compiled programs, the same learning); an unknown name and a changed library source each
fail in one line before anything trains."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rlexp import perf
from tests.helpers import SHORT, run_rlexp

# A library upgrade, simulated: before rlexp starts, a sitecustomize gives Tunix's shard_input other source.
CHANGED_TUNIX = """
from tunix.sft import sharding_utils
exec("def shard_input(input_data, data_sharding_axis):\\n    return input_data", vars(sharding_utils))
"""


def _rlexp(*args: str, changed: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m rlexp <args>`; with `changed`, a folder whose sitecustomize.py changes Tunix first."""
    extra = dict(env or {})
    if changed is not None:
        changed.mkdir(exist_ok=True)
        (changed / "sitecustomize.py").write_text(CHANGED_TUNIX)
        extra["PYTHONPATH"] = str(changed)
    return run_rlexp(*args, env={**os.environ, **extra})


def test_an_unknown_patch_is_refused_in_one_line(tmp_path: Path) -> None:
    out = _rlexp("perf.patches=[token_row]", f"hydra.run.dir={tmp_path / 'run'}")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "rlexp: error: perf.patches='token_row': no such patch; did you mean token_rows? use a list of "
        + ", ".join(perf.PATCHES)
        + ", or [] for none"
    ]
    assert not list((tmp_path / "run").glob("*"))  # refused before the run took its dir


@pytest.mark.slow
def test_a_changed_library_source_fails_in_one_line_naming_the_patch_and_the_key(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = _rlexp(*SHORT, f"hydra.run.dir={run_dir}", changed=tmp_path / "site")
    assert out.returncode == 1, out.stderr[-3000:]
    rest = ",".join(p for p in perf.PATCHES if p != "one_device_put")
    assert out.stderr.strip().splitlines() == [
        "rlexp: error: perf.patches=one_device_put: tunix.sft.sharding_utils.shard_input is not the code the patch "
        f"was written against (google-tunix 0.1.7: source fingerprint no source, expected 0e7a062e6f77ed9a); "
        f"run without it: perf.patches=[{rest}]"
    ]
    assert not (run_dir / "summary.json").exists() and not (run_dir / "checkpoints").exists()
    # and the hint works: without that patch the same changed library trains
    out = _rlexp(
        *SHORT,
        "trainer.max_steps=1",
        f"perf.patches=[{rest}]",
        f"hydra.run.dir={tmp_path / 'r2'}",
        changed=tmp_path / "site",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        json.loads((tmp_path / "r2" / "summary.json").read_text())["perf"]["patches"] == rest.split(",")[:-1]
    )  # malloc: not for the tiny model's buffers


@pytest.fixture(scope="module")
def default_runs(default_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The embedded default as typed, with the patches (the session's `default_run`, tests/conftest.py) and with
    `perf.patches=[]`, XLA dumping the train step's programs (`<run>/hlo`): one pair of runs for what they compile
    and for what they learn."""
    run_dir = tmp_path_factory.mktemp("none")
    flags = f"--xla_dump_to={run_dir / 'hlo'} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*train_step.*"
    out = _rlexp("logger=none", "perf.patches=[]", f"hydra.run.dir={run_dir / 'run'}", env={"XLA_FLAGS": flags})
    assert out.returncode == 0, out.stderr[-3000:]
    return {"all": default_run, "none": run_dir}


def _train_step_program(run_dir: Path) -> str:
    (text,) = [p.read_text() for p in (run_dir / "hlo").glob("*jit__train_step*after_optimizations.txt")]
    return text


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "run" / "summary.json").read_text())


@pytest.mark.slow
def test_no_patches_compiles_tunix_s_own_programs(default_runs: dict[str, Path]) -> None:
    patched = _train_step_program(default_runs["all"])
    own = _train_step_program(default_runs["none"])
    assert patched != own
    summary = _summary(default_runs["none"])
    assert summary["perf"]["patches"] == [] and summary["perf"]["kernels"] == {}
    # and Tunix's own classes sampled: the classes that ran, taken from the live objects
    classes = summary["perf"]["classes"]
    assert classes["sampler"] == "tunix.generate.sampler.Sampler"
    assert classes["rollout"] == "tunix.rl.rollout.vanilla_rollout.VanillaRollout"
    assert classes["learner"] == "tunix.rl.grpo.grpo_learner.GRPOLearner"
    assert classes["cluster"].endswith("(tunix.rl.rl_cluster.RLCluster)")  # rlexp's RecordingCluster
    summary = _summary(default_runs["all"])
    assert summary["perf"]["patches"] == [p for p in perf.PATCHES if p != "malloc"]  # the tiny model: small buffers
    assert summary["perf"]["kernels"] == {"decode_attention": "built"}
    assert summary["perf"]["classes"]["sampler"] == (
        "rlexp.tunix.sampler.lean_rollout_engine.LeanSampler(tunix.generate.sampler.Sampler)"
    )


@pytest.mark.slow
def test_no_patches_learns_as_the_patched_default_does(default_runs: dict[str, Path]) -> None:
    """The embedded default as typed, with and without the patches: both gain pass@1, by amounts within the
    spread of seeds (README: +0.219 to +0.264), though float summation orders differ."""
    gains = {name: _summary(run_dir)["eval"]["gain"]["pass_at_1"] for name, run_dir in default_runs.items()}
    assert gains["all"] >= 0.15 and gains["none"] >= 0.15, gains
    assert abs(gains["all"] - gains["none"]) <= 0.08, gains
