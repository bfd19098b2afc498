"""Slurm: the submitit launcher sized from GPU slices, and jax.distributed arguments from the Slurm env."""

from __future__ import annotations

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


@pytest.mark.parametrize(("slice_name", "nodes", "gpus"), [("gpu-8xh200", 1, 8), ("gpu-2x8xh200", 2, 8)])
def test_slurm_launcher_takes_nodes_and_gpus_from_the_slice(slice_name: str, nodes: int, gpus: int) -> None:
    launcher = _hydra_launcher([f"slice={slice_name}", "hydra/launcher=slurm"])
    assert launcher["_target_"].endswith("submitit_launcher.SlurmLauncher")
    assert (launcher["nodes"], launcher["gpus_per_node"], launcher["tasks_per_node"]) == (nodes, gpus, 1)


def test_hostlist_expansion() -> None:
    assert expand_hostlist("gpu[01-03,07],cpu5") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]
    assert expand_hostlist("node-a") == ["node-a"]


def test_distributed_args_from_slurm_env() -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_JOB_NODELIST": "h200-[3-4]"}
    args = slurm_args(env)
    assert args is not None
    assert (args.coordinator_address, args.num_processes, args.process_id) == ("h200-3:12355", 2, 1)
    assert slurm_args({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "1"}) is None  # one process: no coordinator
    assert initialize({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "1"}) == "local"


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
    assert prepare_in_job() == "local"  # one task: no jax.distributed
    assert json.loads((tmp_path / "launcher.json").read_text()) == {"launcher": "slurm", "handle": "77"}
