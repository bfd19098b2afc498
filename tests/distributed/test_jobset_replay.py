"""Multi-controller JobSet replay: each worker pod of a rendered `hydra.launcher.pathways=false` JobSet, run here.

The user's dry run (`python -m rlexp slice=v6e-8 hydra.launcher.pathways=false hydra.launcher.dry_run=true ...`)
renders one `slice-job` with a pod per TPU VM (2 on v6e-8). This test takes the `rlexp` container's command,
args and env from that jobset.yaml and starts it once per pod with the environment Kubernetes would give that
pod: the downward-API values (JobSet name and replicated-job annotations, the completion index as
JAX_PROCESS_ID) and `$(VAR)` references expanded as the kubelet expands them. Changed, and only these:

  command  `python` -> this interpreter
  args     `slice=v6e-8` -> `slice=cpu-2x1` (2 processes of one CPU device: the same process layout),
           `output_dir=gs://...` -> a local dir both pods share (a bucket on GKE)
  env      JAX_COORDINATOR_ADDRESS: pod 0's DNS name (checked) -> 127.0.0.1, the one name only cluster DNS knows;
           RLEXP_OUTPUT_DIR -> the local dir; PATH and HOME from this machine; the optional secrets absent;
           RLEXP_PLAN (the submitter's plan) dropped: the slice swap makes another config than the one it was made
           for, which a pod refuses, so each pod plans itself (tests/train/test_plan.py replays one unswapped)

The two processes must join one JAX runtime and train a completed run, as the pods would on the slice.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import pytest
import yaml

from tests.helpers import run_rlexp, start_rlexp

pytestmark = pytest.mark.slow

# the evals' shapes (16 prompts, 2 samples) those of tests.helpers.SHORT, as in tests/distributed/test_two_processes.py:
# pod 0 reads the cpu-2x1 eval programs that test's process 0 compiled, instead of compiling a pair of its own
RUN = ["trainer.max_steps=1", "trainer.eval_every=1", "trainer.checkpoint_every=1", "trainer.eval_prompts=16",
       "trainer.eval_samples=2", "logger=none"]  # fmt: skip


def dry_run(run_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RLEXP_OUTPUT_ROOT", "KUBECONFIG")}
    cmd = [
        "slice=v6e-8",
        "hydra.launcher.pathways=false",
        "hydra.launcher.dry_run=true",
        *RUN,
        f"hydra.run.dir={run_dir}",
    ]
    done = run_rlexp(*cmd, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return yaml.safe_load((run_dir / "jobset.yaml").read_text())


def pod_env(container: dict, fields: dict[str, str]) -> dict[str, str]:
    """The container's env as the kubelet builds it: downward-API fields, then `$(VAR)` expanded in order."""
    env: dict[str, str] = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        elif "fieldRef" in e["valueFrom"]:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            env[e["name"]] = fields[re.fullmatch(r"metadata\.annotations\['(.+)'\]", path).group(1)]  # type: ignore[union-attr]
        else:
            assert e["valueFrom"]["secretKeyRef"]["optional"] is True, e  # only optional secrets are left out
    return env


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_worker_pods_train_together(tmp_path: Path) -> None:
    jobset = dry_run(tmp_path / "dry")
    name = jobset["metadata"]["name"]
    (job,) = jobset["spec"]["replicatedJobs"]
    pods = job["template"]["spec"]
    assert job["name"] == "slice-job" and pods["completionMode"] == "Indexed" and pods["completions"] == 2
    (container,) = pods["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "rlexp"] and "slice=v6e-8" in container["args"]
    (gs_out,) = [a for a in container["args"] if a.startswith("output_dir=")]
    out = tmp_path / "run"
    args = [{"slice=v6e-8": "slice=cpu-2x1", gs_out: f"output_dir={out}"}.get(a, a) for a in container["args"]]

    procs = []
    for index in range(pods["completions"]):
        fields = {
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/replicatedjob-name": job["name"],
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        env = pod_env(container, fields)
        assert env["JAX_COORDINATOR_ADDRESS"] == f"{name}-slice-job-0-0.{name}"  # pod 0's hostname in the JobSet
        assert (env["JAX_PROCESS_ID"], env["JAX_PROCESS_COUNT"], env["RLEXP_IN_CLUSTER"]) == (str(index), "2", "gke")
        assert port_free(int(env["JAX_COORDINATOR_PORT"])), "the manifest's coordinator port is taken here"
        assert json.loads(env.pop("RLEXP_PLAN"))["run_dir"] == env["RLEXP_OUTPUT_DIR"]
        env.update(
            JAX_COORDINATOR_ADDRESS="127.0.0.1",
            RLEXP_OUTPUT_DIR=str(out),
            PATH=os.environ["PATH"],
            HOME=os.environ.get("HOME", str(tmp_path)),
        )
        cwd = tmp_path / f"pod{index}"  # each pod has its own file system; only output_dir is shared
        cwd.mkdir()
        log = open(tmp_path / f"pod{index}.log", "w")  # noqa: SIM115 - the child keeps its own descriptor
        procs.append(start_rlexp(*args, cwd=cwd, env=env, stdout=log, stderr=log))
        log.close()
    try:
        codes = [p.wait(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    logs = "\n".join(f"--- pod{i}\n{(tmp_path / f'pod{i}.log').read_text()[-3000:]}" for i in range(2))
    assert codes == [0, 0], logs
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 1, summary
    assert summary["train"]["processes"] == 2  # one JAX runtime across the two pods
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    assert (out / "checkpoints" / "actor" / "1").is_dir()  # written by both processes
