"""sweep.json bookkeeping without training: job planning, refresh from run dirs, resume decisions, the table."""

from __future__ import annotations

import json
import math

import fsspec
import pytest
from omegaconf import OmegaConf

from rlexp import storage
from rlexp.launch.callbacks import plan
from rlexp.sweep import manifest, progress
from rlexp.sweep.resume import completed_objective

BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def hydra_cfg(params: dict, task: list[str], target: str = BASIC):
    return OmegaConf.create({"hydra": {"sweeper": {"_target_": target, "params": params}, "overrides": {"task": task}}})


def test_plan_matches_basic_sweeper_order_and_cli_wins() -> None:
    cfg = hydra_cfg(
        {"trainer.learning_rate": "3e-4,1e-3,3e-3", "trainer.beta": "0.0,0.04,0.1"},
        ["+sweep=lr_beta", "trainer.learning_rate=1e-3,3e-3", "trainer.beta=0,0.04", "trainer.max_steps=10"],
    )
    jobs, swept = plan(cfg)
    assert swept == ["trainer.learning_rate", "trainer.beta"]
    assert jobs == [
        ["trainer.learning_rate=0.001", "trainer.beta=0", "+sweep=lr_beta", "trainer.max_steps=10"],
        ["trainer.learning_rate=0.001", "trainer.beta=0.04", "+sweep=lr_beta", "trainer.max_steps=10"],
        ["trainer.learning_rate=0.003", "trainer.beta=0", "+sweep=lr_beta", "trainer.max_steps=10"],
        ["trainer.learning_rate=0.003", "trainer.beta=0.04", "+sweep=lr_beta", "trainer.max_steps=10"],
    ]


def test_plan_leaves_optuna_jobs_to_the_sweeper() -> None:
    cfg = hydra_cfg({"trainer.learning_rate": "tag(log, interval(1e-4, 1e-2))"}, [], target="x.OptunaSweeper")
    jobs, swept = plan(cfg)
    assert jobs is None and swept == ["trainer.learning_rate"]


def test_comparable_ignores_sweep_bookkeeping() -> None:
    a = ["trainer.beta=0", "+sweep=lr_beta"]
    assert manifest.comparable([*a, "sweep.resume=true"]) == a
    assert manifest.comparable(["trainer.beta=0.1"]) != manifest.comparable(a)


@pytest.fixture
def memory_sweep():
    fs = fsspec.filesystem("memory")
    root = "memory://bucket/sweeps/s1"
    yield root
    fs.rm("/bucket", recursive=True)


def write_summary(job_dir: str, status: str, value: float | None) -> None:
    storage.write_json(
        storage.join(job_dir, "summary.json"),
        {"status": status, "objective": {"name": "eval.after.pass_at_1", "value": value}, "eval": {"after": {}}},
    )


def test_manifest_refresh_reads_run_dirs_through_fsspec(memory_sweep: str) -> None:
    data = manifest.new_manifest(
        memory_sweep, name="s", group="s-1", objective="eval.after.pass_at_1", direction="maximize", sweeper="basic"
    )
    for num in range(3):
        manifest.upsert_job(data, num, overrides=[f"trainer.beta={num}"], state="running")
    write_summary(storage.join(memory_sweep, "0"), "completed", 0.5)
    write_summary(storage.join(memory_sweep, "1"), "interrupted", None)
    storage.write_json(storage.join(memory_sweep, "2", "launcher.json"), {"launcher": "gke", "handle": "rlexp-s1-2"})
    storage.write_json(storage.join(memory_sweep, "0", "wandb_run.json"), {"id": "abc123"})
    manifest.save(memory_sweep, manifest.refresh(memory_sweep, data))

    again = manifest.load(memory_sweep)
    assert again is not None
    states = [(j["num"], j["state"]) for j in again["jobs"]]
    assert states == [(0, "completed"), (1, "failed"), (2, "running")]
    assert again["jobs"][0]["objective"] == 0.5 and again["jobs"][0]["wandb_run_id"] == "abc123"
    assert again["jobs"][2]["launcher"] == {"launcher": "gke", "handle": "rlexp-s1-2"}
    assert manifest.completed_nums(again) == {0}
    assert json.loads(fsspec.filesystem("memory").cat("/bucket/sweeps/s1/sweep.json"))["group"] == "s-1"


def test_completed_objective_decides_resume(tmp_path) -> None:
    write_summary(str(tmp_path / "done"), "completed", 0.75)
    write_summary(str(tmp_path / "cut"), "interrupted", 0.1)
    write_summary(str(tmp_path / "nan"), "completed", None)
    assert completed_objective(str(tmp_path / "done"), "eval.after.pass_at_1") == 0.75
    assert completed_objective(str(tmp_path / "cut"), "eval.after.pass_at_1") is None
    assert completed_objective(str(tmp_path / "never"), "eval.after.pass_at_1") is None
    assert math.isnan(completed_objective(str(tmp_path / "nan"), "eval.after.pass_at_1"))


def test_progress_table_counts_and_columns() -> None:
    data = manifest.new_manifest("/s", name="s", group="g", objective="obj", direction="maximize", sweeper="basic")
    data["swept_keys"] = ["trainer.beta"]
    manifest.upsert_job(data, 0, overrides=["trainer.beta=0"], state="completed", objective=0.5)
    manifest.upsert_job(data, 1, overrides=["trainer.beta=0.04"], state="running")
    manifest.upsert_job(data, 2, overrides=["trainer.beta=0.1"], state="failed")
    manifest.upsert_job(data, 3, overrides=["trainer.beta=1"], state="pending")
    table = progress.render(data).splitlines()
    assert table[0] == "sweep g: 1/4 done, 1 running, 1 failed, 1 pending"
    assert table[1].split() == ["job", "trainer.beta", "state", "obj", "handle"]
    assert table[2].split()[:4] == ["+0", "0", "completed", "0.5"]
    assert table[3].split()[:3] == [">1", "0.04", "running"]


def test_remote_launcher_jobs_read_their_run_dir_from_launcher_json(memory_sweep: str, tmp_path) -> None:
    from rlexp.report.load import load

    local = tmp_path / "sweep"  # Hydra's local sweep dir: launcher.json per job
    remote = f"{memory_sweep}/runs"  # where the pods write their run files
    data = manifest.new_manifest(
        str(local), name="s", group="s-1", objective="eval.after.pass_at_1", direction="maximize", sweeper="basic"
    )
    for num in range(2):
        manifest.upsert_job(data, num, overrides=[f"trainer.beta={num}"])
        record = {"launcher": "gke", "handle": f"rlexp-s-{num}", "output_dir": f"{remote}/rlexp-s-{num}"}
        storage.write_json(str(local / str(num) / "launcher.json"), record)
    write_summary(f"{remote}/rlexp-s-0", "completed", 0.6)
    storage.write_text(f"{remote}/rlexp-s-0/metrics.jsonl", '{"step": 1, "rewards/sum": 0.5}\n')
    manifest.refresh(str(local), data)
    assert [j["state"] for j in data["jobs"]] == ["completed", "running"]  # job 1: submitted, no summary yet
    assert data["jobs"][1]["launcher"]["handle"] == "rlexp-s-1"
    assert data["jobs"][0]["run_dir"] == f"{remote}/rlexp-s-0"
    manifest.save(memory_sweep, data)  # sweep.dir=gs://… keeps the manifest next to the runs

    sweep = load([memory_sweep])
    assert [r.state for r in sweep.runs] == ["completed", "running"]
    assert sweep.runs[0].objective == 0.6 and sweep.runs[0].series("rewards/sum") == [(1, 0.5)]
    assert sweep.runs[1].params() == {"trainer.beta": "1"}
