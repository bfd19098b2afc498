"""Slurm without a cluster: the launcher's config from the slice, jax.distributed arguments from a task's
environment, and how rlexp reads Slurm's answers (states, log lines). tests/slurm runs the real thing."""

from __future__ import annotations

import os

import pytest

from rlexp.config.load import CONF_DIR
from rlexp.train.distributed import expand_hostlist, gke_args, initialize, slurm_args


def _hydra_launcher(overrides: list[str]) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        return OmegaConf.to_container(cfg.hydra.launcher, resolve=False) | {
            "nodes": cfg.slice.nodes,
            "gpus_per_node": cfg.slice.gpus_per_node,
        }


@pytest.mark.parametrize(
    ("slice_name", "nodes", "gpus", "tasks"), [("gpu-8xh200", 1, 8, 1), ("gpu-2x8xh200", 2, 8, 1), ("cpu-2x1", 1, 0, 2)]
)
def test_slurm_launcher_takes_nodes_gpus_and_tasks_from_the_slice(
    slice_name: str, nodes: int, gpus: int, tasks: int
) -> None:
    launcher = _hydra_launcher([f"slice={slice_name}", "hydra/launcher=slurm"])
    assert launcher["_target_"] == "hydra_plugins.rlexp_launchers.slurm_launcher.SlurmLauncher"
    assert (launcher["nodes"], launcher["gpus_per_node"]) == (nodes, gpus)
    assert launcher["tasks_per_node"] == "${slice.processes_per_node}"  # one task per JAX process
    from tests.helpers import compose_conf

    assert compose_conf([f"slice={slice_name}"]).slice.processes_per_node == tasks


def test_hostlist_expansion() -> None:
    assert expand_hostlist("gpu[01-03,07],cpu5") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]
    assert expand_hostlist("node-a") == ["node-a"]


def test_distributed_args_from_slurm_env() -> None:
    step = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_PROCID": "1"}
    args = slurm_args({**step, "SLURM_JOB_NODELIST": "h200-[3-4]"})
    assert args is not None  # the coordinator on the first node, a port of the job's own
    assert (args.coordinator_address, args.num_processes, args.process_id) == ("h200-3:12397", 2, 1)
    assert slurm_args({"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"}) is None  # one process
    assert initialize({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "1"}) == "local"


def test_the_step_s_own_nodes_and_tasks_come_first() -> None:
    """`srun -N 2 -n 2` inside a 4-node allocation: the step's first node hosts task 0, not the job's."""
    env = {
        "SLURM_JOB_ID": "1042",
        "SLURM_STEP_ID": "3",
        "SLURM_NTASKS": "8",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_PROCID": "0",
        "SLURM_JOB_NODELIST": "n[1-4]",
        "SLURM_STEP_NODELIST": "n[3-4]",
    }
    args = slurm_args(env)
    assert args is not None and (args.coordinator_address, args.num_processes) == ("n3:12397", 2)
    fixed = slurm_args({**env, "RLEXP_COORDINATOR_PORT": "23456"})
    assert fixed is not None and fixed.coordinator_address == "n3:23456"


def test_a_plain_srun_step_is_a_cluster_job_but_its_batch_script_is_not() -> None:
    from rlexp.train.distributed import in_cluster_job, primary_task

    batch = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "vm"}
    assert not in_cluster_job(batch) and slurm_args(batch) is None  # python run in the sbatch script itself
    task = {**batch, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}
    assert in_cluster_job(task) and not primary_task(task)
    assert primary_task({**task, "SLURM_PROCID": "0"})
    assert not primary_task({"RLEXP_IN_CLUSTER": "gke", "JAX_PROCESS_ID": "1"})


def test_distributed_args_from_gke_multicontroller_env() -> None:
    env = {"JAX_COORDINATOR_ADDRESS": "js-slice-job-0-0.js", "JAX_PROCESS_COUNT": "8", "JAX_PROCESS_ID": "3"}
    args = gke_args(env)
    assert args is not None and (args.coordinator_address, args.num_processes, args.process_id) == (
        "js-slice-job-0-0.js:8476",
        8,
        3,
    )


def test_single_run_with_slurm_asks_for_multirun(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from tests.launch.conftest import run_cli

    rc = run_cli(monkeypatch, "slice=gpu-8xh200", "hydra/launcher=slurm", f"hydra.run.dir={tmp_path}")
    assert rc == 2 and "add -m" in capsys.readouterr().err


def test_slurm_job_records_its_job_id(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import json

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from rlexp.train.distributed import prepare_in_job

    for k, v in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "77", "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(k, v)
    from hydra.conf import HydraConf

    hydra_node = OmegaConf.structured(HydraConf)
    hydra_node.runtime.output_dir = str(tmp_path)
    HydraConfig.instance().set_config(OmegaConf.create({"hydra": hydra_node}))
    (tmp_path / "launcher.json").write_text(json.dumps({"launcher": "slurm", "handle": "77", "logs": ["a.err"]}))
    assert prepare_in_job() == "local"  # one task: no jax.distributed
    record = json.loads((tmp_path / "launcher.json").read_text())
    # what the submitting side recorded stays; the job adds where it ran
    assert record == {"launcher": "slurm", "handle": "77", "logs": ["a.err"], "nodes": None, "tasks": 1}


def test_the_last_error_line_of_a_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rlexp.launch.slurm_logs import last_error_line

    err, out = tmp_path / "0.err", tmp_path / "0.out"
    err.write_text("rlexp: step 2/4 reward 0.3\nsrun: error: vm: task 1: Killed\nsrun: Force Terminated StepId=9.0\n")
    out.write_text("Traceback (most recent call last):\nValueError: boom\n")
    assert last_error_line([err, out]) == "srun: error: vm: task 1: Killed"  # Slurm's word over a traceback
    err.write_text(err.read_text() + "rlexp: error: model.path='/x': no such folder; fix it\n")
    assert last_error_line([err, out]) == "model.path='/x': no such folder; fix it"  # rlexp's own line first
    assert last_error_line([out]) == "ValueError: boom"
    assert last_error_line([tmp_path / "missing.err"]) is None


def test_slurm_states_and_array_tasks() -> None:
    from rlexp.launch.slurm_jobs import rlexp_state
    from rlexp.launch.slurm_queue import array_tasks

    assert [rlexp_state(s) for s in ("PENDING", "REQUEUED", "RUNNING", "COMPLETING", "COMPLETED")] == [
        "pending",
        "pending",
        "running",
        "running",
        "completed",
    ]
    assert [rlexp_state(s) for s in ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED")] == [
        "failed",
        "failed",
        "failed",
        "failed",
        "cancelled",
    ]
    assert array_tasks("0-2,7%2") == ["0", "1", "2", "7"] and array_tasks("N/A") == []


def test_an_error_crosses_processes_with_its_fields() -> None:
    """A Slurm job's error reaches the submitting side pickled (submitit's result file)."""
    import pickle

    from rlexp.errors import ConfigError, RunError

    err = pickle.loads(pickle.dumps(ConfigError("trainer.eval_every", 3, "use a divisor of checkpoint_every")))
    assert isinstance(err, ConfigError) and (err.key, err.value, err.exit_code) == ("trainer.eval_every", 3, 2)
    assert str(err) == "trainer.eval_every=3: use a divisor of checkpoint_every"
    run = pickle.loads(pickle.dumps(RunError("x")))
    assert run.exit_code == 1


def test_the_time_limit_signal_stops_training_inside_a_slurm_job(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from rlexp.train.graceful_stop import stop_signals

    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    assert stop_signals() == (signal.SIGTERM, signal.SIGINT)
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")  # submitit's sbatch asks for --signal=USR2@120
    assert stop_signals() == (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)


def test_the_sweep_table_shows_why_a_job_failed() -> None:
    from rlexp.sweep import progress

    job = {"overrides": ["seed=1"], "objective": None, "launcher": {"handle": "5_1"}}
    manifest = {
        "group": "g",
        "objective": {"name": "eval.after.pass_at_1"},
        "swept_keys": ["seed"],
        "jobs": [
            {**job, "num": 0, "state": "completed", "overrides": ["seed=0"], "launcher": {"handle": "5_0"}},
            {**job, "num": 1, "state": "failed", "error": "Slurm job 5_1 failed: srun: error: vm: task 1: Killed"},
        ],
    }
    lines = progress.render(manifest).splitlines()
    assert lines[1].split() == ["job", "seed", "state", "eval.after.pass_at_1", "handle", "error"]
    assert lines[3].endswith("5_1     Slurm job 5_1 failed: srun: error: vm: task 1: Killed")
    manifest["jobs"].pop()
    assert "error" not in progress.render(manifest)  # no failure, no column


def test_a_stopped_slurm_job_leaves_without_a_result_and_requeues_itself_before_its_time_limit(
    tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM (requeue, preemption, scancel): exit 0 with no result, Slurm decides what follows. The time-limit
    warning (USR2): the same, after `scontrol requeue` of the job itself (a stand-in scontrol records the call)."""
    from rlexp.errors import RunError
    from rlexp.train.graceful_stop import GracefulStop
    from rlexp.train.run import leave_for_requeue

    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    for k, v in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "12", "SLURM_ARRAY_JOB_ID": "9"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    err = RunError("run: interrupted at step 3, checkpoint saved; rerun the same command to resume")

    stop = GracefulStop(signals=())
    stop.requested = stop.stopped = "SIGTERM"
    with pytest.raises(SystemExit) as exited:
        leave_for_requeue(err, stop)
    assert exited.value.code == 0 and not calls.exists()  # Slurm requeues (or cancelled) it; nothing to do
    assert capsys.readouterr().err == f"rlexp: error: {err}\n"

    stop.requested = "SIGUSR2"
    with pytest.raises(SystemExit) as exited:
        leave_for_requeue(err, stop)
    assert exited.value.code == 0 and calls.read_text() == "requeue 9_1\n"
    assert "rlexp: requeued Slurm job 9_1 before its time limit" in capsys.readouterr().err
