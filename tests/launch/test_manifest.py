"""Rendered JobSets: the CRD schema (strict), structural rules, and the Pathways layout of the reference."""

from __future__ import annotations

import copy

import pytest

from rlexp.config.hardware import tpu_slice
from rlexp.config.launcher import GkeLauncherConf
from rlexp.launch.jobset_checks import ManifestError, check_jobset, rule_errors, schema_errors
from rlexp.launch.manifest import COMMAND, JobSpec, render


def _render(slice_name: str = "v6e-32", name: str = "grpo-gemma-1a2b3c4", **conf: object) -> dict:
    spec = JobSpec(
        name=name,
        slice=tpu_slice(slice_name),
        num_slices=1,
        args=["model=gemma4_e4b", f"slice={slice_name}", "output_dir=gs://b/r/x"],
        output_dir="gs://b/r/x",
        run_name="run",
    )
    return render(spec, GkeLauncherConf(**conf))  # type: ignore[arg-type]


def _by_name(items: list[dict]) -> dict[str, dict]:
    return {i["name"]: i for i in items}


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


@pytest.mark.parametrize(
    ("slice_name", "topology", "accel", "instance"),
    [
        ("v6e-32", "4x8", "tpu-v6e-slice", "tpuv6e:4x8"),
        ("v5p-64", "2x4x4", "tpu-v5p-slice", "tpuv5:2x4x4"),
    ],
)
def test_pathways_layout_matches_reference(slice_name: str, topology: str, accel: str, instance: str) -> None:
    js = _render(slice_name)
    check_jobset(js, tpu_slice(slice_name))
    spec = js["spec"]
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and js["kind"] == "JobSet"
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    assert spec["coordinator"]["replicatedJob"] == "pathways-head"
    assert spec["startupPolicy"] == {"startupPolicyOrder": "InOrder"}
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["pathways-head"]}
    rjobs = _by_name(spec["replicatedJobs"])
    assert list(rjobs) == ["pathways-head", "worker"]
    head, worker = rjobs["pathways-head"], rjobs["worker"]
    assert (
        head["template"]["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
        == "kubernetes.io/hostname"
    )
    assert (
        worker["template"]["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
        == "cloud.google.com/gke-nodepool"
    )
    hjob, wjob = head["template"]["spec"], worker["template"]["spec"]
    assert (hjob["completions"], hjob["parallelism"], hjob["backoffLimit"]) == (1, 1, 0)
    assert (wjob["completions"], wjob["parallelism"], wjob["backoffLimit"]) == (8, 8, 32)
    hpod, wpod = hjob["template"]["spec"], wjob["template"]["spec"]
    assert hpod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-np"}
    assert hpod["hostNetwork"] and hpod["dnsPolicy"] == "ClusterFirstWithHostNet" and hpod["restartPolicy"] == "Never"
    sidecars = _by_name(hpod["initContainers"])
    assert set(sidecars) == {"pathways-proxy", "pathways-rm"}
    assert all(c["restartPolicy"] == "Always" for c in sidecars.values())
    assert "--server_port=29000" in sidecars["pathways-proxy"]["args"]
    assert f"--instance_type={instance}" in sidecars["pathways-rm"]["args"]
    assert "--instance_count=1" in sidecars["pathways-rm"]["args"]
    (user,) = hpod["containers"]
    assert user["name"] == "rlexp" and user["command"] == COMMAND == ["python", "-m", "rlexp"]
    assert user["args"] == ["model=gemma4_e4b", f"slice={slice_name}", "output_dir=gs://b/r/x"]
    env = _env(user)
    assert env["JAX_PLATFORMS"]["value"] == "proxy"
    assert env["JAX_BACKEND_TARGET"]["value"] == "grpc://$(PATHWAYS_HEAD):29000"
    assert (
        env["PATHWAYS_HEAD"]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.labels['jobset.sigs.k8s.io/coordinator']"
    )
    assert wpod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": accel,
        "cloud.google.com/gke-tpu-topology": topology,
    }
    assert wpod["restartPolicy"] == "OnFailure" and wpod["priorityClassName"] == "medium"
    (w,) = wpod["containers"]
    assert w["resources"]["limits"]["google.com/tpu"] == "4"
    wenv = _env(w)
    assert {"MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID", "MEGASCALE_COORDINATOR_ADDRESS", "PATHWAYS_HEAD"} <= set(wenv)


def test_multicontroller_variant() -> None:
    js = _render("v6e-32", pathways=False, max_restarts=3)
    check_jobset(js, tpu_slice("v6e-32"))
    (rj,) = js["spec"]["replicatedJobs"]
    job = rj["template"]["spec"]
    pod = job["template"]["spec"]
    assert (job["completions"], job["parallelism"]) == (8, 8)
    assert pod["restartPolicy"] == "Never" and "podFailurePolicy" in job
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 3
    env = _env(pod["containers"][0])
    assert env["JAX_PROCESS_COUNT"]["value"] == "8"
    assert "job-completion-index" in env["JAX_PROCESS_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert "RLEXP_PATHWAYS" not in env


def test_secrets_only_as_secret_key_refs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_supersecret123")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-456")
    js = _render(secret_name="team-secrets")
    text = repr(js)
    assert "hf_supersecret123" not in text and "wandb-secret-456" not in text
    env = _env(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0])
    for key in ("HF_TOKEN", "WANDB_API_KEY"):
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": "team-secrets", "key": key, "optional": True}
        assert "value" not in env[key]
    bad = copy.deepcopy(js)
    bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "HF_TOKEN", "value": "x"}
    )
    assert any("secretKeyRef" in e for e in rule_errors(bad))


def test_kubernetes_variable_syntax_in_overrides_is_escaped() -> None:
    spec = JobSpec("a-1234567", tpu_slice("v6e-4"), 1, ["+note=x $(HOME) y"], "gs://b/x", "r")
    user = render(spec, GkeLauncherConf())["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert user["args"] == ["+note=x $$(HOME) y"]


def test_schema_catches_typos_and_unknown_fields() -> None:
    js = _render()
    assert schema_errors(js) == []
    typo = copy.deepcopy(js)
    typo["spec"]["failurePolicy"]["restartStrategy"] = "Restart"
    assert any("restartStrategy" in e for e in schema_errors(typo))
    unknown = copy.deepcopy(js)
    unknown["spec"]["replicatedJobs"][1]["template"]["spec"]["completion"] = 8
    assert any("completion" in e for e in schema_errors(unknown))


def test_structural_rules() -> None:
    tpu = tpu_slice("v6e-32")
    long = _render(name="a" * 23)
    errs = rule_errors(long, tpu)
    assert any("metadata.name" in e for e in errs) and any("coordinator label" in e for e in errs)
    wrong_vms = _render()
    wjob = wrong_vms["spec"]["replicatedJobs"][1]["template"]["spec"]
    wjob["completions"] = wjob["parallelism"] = 4
    assert any("chips requested (16)" in e for e in rule_errors(wrong_vms, tpu))
    wrong_topo = _render()
    wrong_topo["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["nodeSelector"][
        "cloud.google.com/gke-tpu-topology"
    ] = "8x4"
    assert any("topology selector" in e for e in rule_errors(wrong_topo, tpu))
    bad_policy = _render(pathways=False)
    bad_policy["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    assert any("podFailurePolicy needs" in e for e in rule_errors(bad_policy, tpu))
    with pytest.raises(ManifestError, match="is invalid"):
        check_jobset(long, tpu)
    assert any("label values" in e for e in rule_errors(_render(queue="team a/queue"), tpu))


def test_undefined_variable_references_are_caught() -> None:
    js = _render()
    worker = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]
    worker["env"] = [e for e in worker["env"] if e["name"] != "PATHWAYS_HEAD"]
    assert any("$(PATHWAYS_HEAD)" in e and "does not define" in e for e in rule_errors(js))
    spec = JobSpec("a-1234567", tpu_slice("v6e-4"), 1, ["+note=$(HOME)"], "gs://b/x", "r")
    assert rule_errors(render(spec, GkeLauncherConf()), tpu_slice("v6e-4")) == []  # escaped: $$(HOME)
