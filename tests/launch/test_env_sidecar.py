"""env=openenv with an image on remote launchers: a GKE dry run serves it from a native sidecar of the rlexp pod
(probed, valid against the JobSet schema, the pod's run pointed at it, no docker on the submitting machine); Slurm
carries env.image and env.command to the job unchanged (rlexp starts the server there: tests/slurm/test_slurm_env.py
runs one), refusing an image in one line where the submitting machine has no docker."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from rlexp import envs
from rlexp.config.hardware import tpu_slice
from rlexp.launch.env_sidecar import SIDECAR_URL
from rlexp.launch.jobset_checks import check_jobset
from tests.helpers import compose_conf
from tests.launch.conftest import run_cli
from tests.launch.test_launcher import _assert_the_pod_s_plan

IMAGE = "ghcr.io/example/guess-env:1.0"
RUN = ["env=openenv", "model=gemma4_e4b", "chat_template=gemma", "slice=v6e-32", "trainer.max_steps=100",
       "trainer.eval_prompts=64"]  # fmt: skip


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The submitting machine has no docker: only a local run starts the image."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    monkeypatch.delenv("KUBECONFIG", raising=False)


def _rlexp_pod(js: dict) -> dict:
    """The pod spec whose containers include rlexp (Pathways: the head; else each TPU VM's)."""
    for job in js["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        if any(c["name"] == "rlexp" for c in pod["containers"]):
            return pod
    raise AssertionError("no rlexp container")


@pytest.mark.parametrize("pathways", ["true", "false"])
def test_a_gke_dry_run_serves_the_image_from_a_probed_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, no_docker: None, pathways: str
) -> None:
    run_dir = tmp_path / "run"
    rc = run_cli(monkeypatch, *RUN, f"env.image={IMAGE}", f"hydra.launcher.pathways={pathways}",
                 "hydra.launcher.dry_run=true", f"hydra.run.dir={run_dir}")  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"env.image {IMAGE} is served by the pod's sidecar" in out  # its rows: checked by the job
    js = yaml.safe_load((run_dir / "jobset.yaml").read_text())
    check_jobset(js, tpu_slice("v6e-32"))  # the JobSet CRD's schema (v0.12.0) and rlexp's strict checks
    pod = _rlexp_pod(js)
    (side,) = [c for c in pod["initContainers"] if c["name"] == "openenv-server"]
    assert side["image"] == IMAGE and side["restartPolicy"] == "Always"  # a native sidecar
    health = {"httpGet": {"path": "/health", "port": 8000}}
    assert side["readinessProbe"].items() >= health.items() and side["startupProbe"].items() >= health.items()
    assert side["ports"] == [{"containerPort": 8000}]
    (user,) = [c for c in pod["containers"] if c["name"] == "rlexp"]
    assert user["args"][-4:-2] == ["env.image=null", f"++env.url={SIDECAR_URL}"]
    # the pod's command composes a config reaching the sidecar, checked without docker (no image left to run)
    conf = compose_conf([a for a in user["args"] if not a.startswith(("hydra.", "output_dir="))])
    assert (conf.env.url, conf.env.image) == ("http://127.0.0.1:8000", None)
    envs.check_env(envs.resolve(conf))
    assert "url: http://127.0.0.1:8000" in (run_dir / "config.resolved.yaml").read_text()


def test_a_task_s_image_in_a_sweep_carries_the_plan_the_pod_replays(
    tmp_path: Path, make_launcher: object, no_docker: None
) -> None:
    task = f"+env.tasks.guess={{image: '{IMAGE}', split: easy}}"
    base = [*RUN, "hydra.launcher.pathways=false", "hydra.launcher.dry_run=true"]
    launcher = make_launcher(tmp_path, *base, task)  # type: ignore[operator]
    jobs = [[*RUN, task, f"seed={s}"] for s in (0, 1)]
    rets = launcher.launch(jobs, initial_job_idx=0)  # type: ignore[attr-defined]
    assert [r.status.name for r in rets] == ["COMPLETED"] * 2
    for i in range(2):
        js = yaml.safe_load((tmp_path / str(i) / "jobset.yaml").read_text())
        check_jobset(js, tpu_slice("v6e-32"))
        pod = _rlexp_pod(js)
        assert [c["image"] for c in pod["initContainers"]] == [IMAGE]
        args = pod["containers"][0]["args"]
        assert ["env.tasks.guess.image=null", f"++env.tasks.guess.url={SIDECAR_URL}"] == args[len(jobs[i]) :][:2]
        _assert_the_pod_s_plan(launcher, js, args)  # its config hash is the one the pod composes


def test_two_images_in_one_pod_are_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, no_docker: None
) -> None:
    rc = run_cli(monkeypatch, *RUN, f"+env.tasks.a={{image: '{IMAGE}'}}", "+env.tasks.b={image: 'other:2'}",
                 "hydra.launcher.dry_run=true", f"hydra.run.dir={tmp_path}")  # fmt: skip
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("rlexp: error: env.tasks.b.image='other:2': a GKE pod serves one image")


def test_a_local_run_still_needs_docker_for_an_image(no_docker: None) -> None:
    conf = compose_conf(["env=openenv", f"env.image={IMAGE}"])
    with pytest.raises(Exception, match="docker is not on this machine's PATH"):
        envs.resolve(conf)


SLURM = ["-m", "hydra/launcher=slurm", "slice=cpu-2x1", "env=openenv", "model=tiny_tools", "chat_template=chatml",
         "env.train_size=8", "env.eval_size=4", "trainer.max_prompt_tokens=48", "trainer.max_completion_tokens=96",
         "agent.max_turn_tokens=8", "trainer.max_steps=1", "trainer.eval_prompts=4"]  # fmt: skip


@pytest.fixture
def slurm_here(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """No cluster needed: the cluster checks pass, and what would be submitted is kept (the jobs' overrides)."""
    from rlexp.errors import RlexpError
    from rlexp.launch import slurm_cluster, slurm_submit

    submitted: list[list[str]] = []

    def submit(launcher: object, inner: object, jobs: list, singletons: object) -> None:
        submitted.extend(slurm_submit.with_plan(j) for j in jobs)
        raise RlexpError("submitted (test)")

    monkeypatch.setattr(slurm_cluster, "check_cluster_once", lambda params: None)
    monkeypatch.setattr(slurm_cluster, "check_launcher", lambda config: None)
    monkeypatch.setattr(slurm_submit, "_submit", submit)
    return submitted


def test_slurm_carries_an_image_and_a_command_unchanged_and_refuses_an_image_without_docker(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    slurm_here: list[list[str]],
    no_docker: None,
) -> None:
    rc = run_cli(monkeypatch, *SLURM, f"env.image={IMAGE}", f"hydra.sweep.dir={tmp_path / 'a'}")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rlexp: error")]
    assert rc == 2 and len(lines) == 1 and not slurm_here, lines  # refused before anything is queued
    assert lines[0].startswith(f"rlexp: error: env.image='{IMAGE}': docker is not on this machine's PATH")
    docker = tmp_path / "bin" / "docker"  # a docker CLI here (the job checks its node's again where it starts)
    docker.parent.mkdir()
    docker.write_text("#!/bin/sh\nexit 0\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{docker.parent}{os.pathsep}{os.environ['PATH']}")
    rc = run_cli(monkeypatch, *SLURM, f"env.image={IMAGE}", f"hydra.sweep.dir={tmp_path / 'b'}")
    assert "submitted (test)" in capsys.readouterr().err
    command = "python guess_server.py --port {port}"
    rc = run_cli(monkeypatch, *SLURM, f"env.command='{command}'", f"hydra.sweep.dir={tmp_path / 'c'}")
    assert "submitted (test)" in capsys.readouterr().err
    image_job, command_job = slurm_here
    # the jobs compose them as given (Hydra's escaping aside); rlexp starts the server inside the job
    assert compose_conf([a for a in image_job if a.startswith("env")]).env.image == IMAGE
    assert f"env.command='{command}'" in command_job
    assert compose_conf([a for a in command_job if a.startswith("env")]).env.command == command
