"""Failures the table cannot express: tracebacks on request, the run's log, interrupts, damaged checkpoints,
the preflight's counts, and group appends that must stay legal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlexp.config.load import to_config
from rlexp.train.checkpoints import FILES, damage
from tests.cli.conftest import TRAIN
from tests.cli.test_bad_inputs import tree_hash
from tests.helpers import REPO, compose_cfg, run_rlexp, start_rlexp


def rlexp(*args: str, cwd: Path, module: str = "rlexp", **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"} | env
    return run_rlexp(*args, module=module, cwd=cwd, env=environ)


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlexp: error: "), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


def test_group_appends_stay_legal_while_undeclared_keys_are_refused() -> None:
    for preset in ("lr_beta", "optuna_lr", "generations_temperature"):
        to_config(compose_cfg([f"+sweep={preset}"]))  # a sweep preset sets sweep.name: a declared key
    to_config(compose_cfg(["+model.extra.rope_scaling=2.0"]))  # model.extra is free-form
    with pytest.raises(Exception, match="did you mean trainer.learning_rate"):
        to_config(compose_cfg(["+trainer.learning_rat=1e-3"]))


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("rlexp", ["--debug", "trainer.adam_b1=2", "hydra.run.dir=run"]),
        ("rlexp.jobs", ["--debug", "status", "/no/such/dir"]),
    ],
)
def test_debug_and_full_error_keep_the_traceback(module: str, args: list[str], tmp_path: Path) -> None:
    proc = rlexp(*args, cwd=tmp_path, module=module)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "Error" in proc.stderr
    if module == "rlexp":  # HYDRA_FULL_ERROR=1: the same command for both, run once
        full = rlexp("trainer.adam_b1=2", "hydra.run.dir=run", cwd=tmp_path, HYDRA_FULL_ERROR="1")
        assert full.returncode != 0 and "Traceback" in full.stderr and "ConfigError" in full.stderr


def test_validate_counts_dropped_rows(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    rows = [json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) for i in range(6)]
    data.write_text("\n".join([rows[0], '{"question": "cut', *rows[1:]]) + "\n")
    given = tmp_path / "given.jsonl"
    given.write_text("".join(json.dumps({"id": f"jsonl-train-{i}", "completion": "2"}) + "\n" for i in (0, 2)))
    common = ["dataset=jsonl", f"dataset.source={data}", "dataset.eval_size=2", "trainer.eval_prompts=2"]
    ok = rlexp(*common, f"validate.completions={given}", "trainer.max_steps=1", "hydra.run.dir=v", cwd=tmp_path,
               module="rlexp.validate")  # fmt: skip
    assert "preflight warning: dataset_rows: 1 unparseable_record" in ok.stdout, ok.stdout[-2000:]


@pytest.mark.slow
def test_run_time_failure_keeps_its_traceback_in_the_run_log(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = rlexp("dataset=jsonl", f"dataset.source={tmp_path}/none.jsonl", *TRAIN, f"hydra.run.dir={run}",
                 cwd=tmp_path)  # fmt: skip
    line = one_line(proc)
    assert proc.returncode == 2 and "dataset.source=" in line
    log = (run / "main.log").read_text()
    assert line.removeprefix("rlexp: error: ") in log and "Traceback (most recent call last)" in log


# Ctrl-C arrives as the first optimizer update is about to start: nothing is saved, and the line says so.
INTERRUPT = """
import os, runpy, signal, sys
from rlexp.train import hooks
original = hooks.StepHooks.on_train_step_start
def first_step(self, ctx):
    if ctx.train_steps == 0:
        os.kill(os.getpid(), signal.SIGINT)
    return original(self, ctx)
hooks.StepHooks.on_train_step_start = first_step
sys.argv = ["rlexp", *sys.argv[1:]]
runpy.run_module("rlexp", run_name="__main__", alter_sys=True)
"""


@dataclass
class Interrupted:
    """A run of a user's jsonl file, Ctrl-C'd before step 1: what the command printed, its run dir and data file."""

    proc: subprocess.CompletedProcess
    args: list[str]
    run: Path
    data: Path


@pytest.fixture(scope="module")
def interrupted(bad_files: Path, tmp_path_factory: pytest.TempPathFactory) -> Interrupted:
    """One interrupted run shared by the two tests below (each start of a training process costs ~5 CPU-s)."""
    root = tmp_path_factory.mktemp("interrupted")
    data, run = root / "rows.jsonl", root / "run"
    shutil.copy(bad_files / "rows.jsonl", data)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"} | {"PYTHONPATH": str(REPO)}
    # 16 eval rows: TRAIN's trainer.eval_prompts, so the run's programs are the shared run's (compiled once)
    args = ["dataset=jsonl", f"dataset.source={data}", "dataset.eval_size=16", *TRAIN, f"hydra.run.dir={run}"]
    cmd = [sys.executable, "-c", INTERRUPT, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, timeout=600)
    return Interrupted(proc, args, run, data)


@pytest.mark.slow
def test_ctrl_c_before_step_1_claims_no_checkpoint(interrupted: Interrupted) -> None:
    proc, run = interrupted.proc, interrupted.run
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("rlexp: error:")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert errors == [f"rlexp: error: {run}: interrupted before step 1, no checkpoint saved; rerun to start again"]
    assert not list((run / "checkpoints" / "actor").glob("[0-9]*"))
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"
    assert (run / ".hydra" / "overrides.yaml").is_file()


@pytest.mark.slow
def test_a_resume_refused_on_its_data_leaves_the_run_dir_as_it_was(interrupted: Interrupted, bad_files: Path) -> None:
    """The interrupted run, whose data file is then re-encoded: the resume ends in one line naming the file, and
    the run dir (Hydra's records, main.log, summary.json) is byte for byte the interrupted run's."""
    assert interrupted.proc.returncode == 1, interrupted.proc.stderr[-2000:]
    shutil.copy(bad_files / "latin1.jsonl", interrupted.data)
    before = tree_hash(interrupted.run)
    refused = rlexp(*interrupted.args, cwd=interrupted.run.parent)
    assert refused.returncode == 1 and "rows.jsonl:41: not UTF-8" in one_line(refused)
    assert tree_hash(interrupted.run) == before, "a refused resume changed the run dir"


@pytest.mark.slow
def test_damaged_newest_checkpoint_is_set_aside_or_refused(trained_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    actor = run / "checkpoints" / "actor"
    assert damage(actor / "3") is None and (actor / "3" / FILES).is_file()  # recorded once orbax committed it
    cut = tmp_path / "cut"
    shutil.copytree(actor / "3", cut)  # a cut-short copy: its headers say so
    data = max((cut / "model_params").rglob("d/*"), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:100])
    assert "is 100 bytes" in (damage(cut) or "")  # against its record
    (cut / FILES).unlink()
    assert "cut short" in (damage(cut) or "")  # without one, by its headers
    shutil.copytree(actor / "3", actor / "6")  # a newer step that lost one data file: only its record tells
    lost = min((actor / "6" / "model_params").rglob("d/*"), key=lambda p: p.stat().st_size)
    lost.unlink()
    assert (damage(actor / "6") or "").endswith(" missing")

    both = tmp_path / "both"
    shutil.copytree(run, both)
    (both / "checkpoints/actor/3/model_params/_METADATA").write_text('{"tree')
    before = tree_hash(both)
    refused = rlexp(*TRAIN, f"hydra.run.dir={both}", cwd=tmp_path)
    assert refused.returncode == 1 and "cannot be restored" in one_line(refused)
    assert tree_hash(both) == before, "a run that cannot resume changed its run dir"

    resumed = rlexp(*TRAIN, f"hydra.run.dir={run}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    warnings = [ln for ln in resumed.stderr.splitlines() if ln.startswith("rlexp: warning:")]
    assert len(warnings) == 1 and "checkpoint 6 cannot be restored" in warnings[0] and "from step 3" in warnings[0]
    assert (run / "checkpoints.unrestorable" / "actor" / "6").is_dir() and not (actor / "6").exists()
    assert f"resuming {run} from step 3" in resumed.stderr
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize(
    "command",
    [["rlexp", "--help"], ["rlexp", "--cfg", "job"], ["rlexp.jobs", "status", "."]],
    ids=["help", "cfg_job", "jobs_status"],
)
def test_a_reader_that_leaves_early_ends_the_command_quietly(command: list[str], tmp_path: Path) -> None:
    """`python -m rlexp --help | head -0`: the reader is gone before the first line; no BrokenPipeError traceback."""
    environ = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    module, *args = command
    if module == "rlexp.jobs":  # a dry run's record: the status table, no cluster asked
        (tmp_path / "launcher.json").write_text('{"launcher": "gke", "handle": "tiny-arith-0", "state": "dry-run"}')
    proc = start_rlexp(
        *args, module=module, cwd=tmp_path, env=environ, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, bufsize=1,
    )  # fmt: skip
    proc.stdout.close()  # closed long before the interpreter starts up and prints
    _, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr[-2000:]
    assert proc.returncode == 141, stderr[-2000:]  # 128 + SIGPIPE, as a shell reports a tool stopped by the pipe
