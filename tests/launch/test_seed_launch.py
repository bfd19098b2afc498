"""The seeds' launch settings through the user's command: JobSet names and labels their monitoring commands
find, a taken name refused for another config, pinned Pathways images, proxy XLA flags, the placeholder image.

Submissions go to the loopback API server (tests/launch/fake_apiserver.py); the seeds' `kubectl get ... -l`
commands are replayed with the same label selectors through the `kubernetes` client.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rlexp.config.launcher import SEED_PROXY_IMAGE, SEED_PROXY_XLA_FLAGS, SEED_SERVER_IMAGE
from rlexp.launch.names import jobset_name
from tests.helpers import compose_conf
from tests.launch.conftest import TEST_IMAGE, run_cli
from tests.launch.fake_apiserver import FakeApiServer

ROOT = "hydra.launcher.output_root=gs://bucket/rlexp"
OMI2 = ["experiment=gemma4_e4b_omi2", "run_name=omi2-r1", ROOT]


def _kubectl_get(api: FakeApiServer, what: str, selector: str) -> list[str]:
    """`kubectl get jobset|pods -l <selector>`: the names the API server returns for that label selector."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(Path(__import__("os").environ["KUBECONFIG"])))
    if what == "jobset":
        out = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", label_selector=selector
        )
        return sorted(o["metadata"]["name"] for o in out["items"])
    pods = client.CoreV1Api(api_client).list_namespaced_pod("default", label_selector=selector)
    return sorted(p.metadata.name for p in pods.items)


def _head(js: dict) -> dict:
    return js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_seed_monitoring_commands_find_the_run_and_a_taken_name_is_refused(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    assert run_cli(monkeypatch, *OMI2, f"hydra.run.dir={tmp_path / 'a'}") == 0
    assert list(api.jobsets) == [("default", "omi2-r1")]  # the run name, verbatim
    labels = api.jobsets[("default", "omi2-r1")]["metadata"]["labels"]
    assert labels["xpk.google.com/workload"] == labels["gcluster.google.com/workload"] == "omi2-r1"
    assert _kubectl_get(api, "jobset", "gcluster.google.com/workload=omi2-r1") == ["omi2-r1"]
    assert _kubectl_get(api, "jobset", "gcluster.google.com/workload=other") == []
    pods = _kubectl_get(api, "pods", "jobset.sigs.k8s.io/jobset-name=omi2-r1")
    assert len(pods) == 9 and pods[0].startswith("omi2-r1-pathways-head-0-0")  # head + 8 v6e-32 workers
    capsys.readouterr()

    # the same command again: the existing JobSet, not a duplicate
    assert run_cli(monkeypatch, *OMI2, f"hydra.run.dir={tmp_path / 'b'}") == 0
    assert "omi2-r1 already exists (submitted before; not duplicated)" in capsys.readouterr().out

    # another config under the taken name: one line, nothing submitted
    posts = sum(m == "POST" for m, _ in api.requests)
    assert run_cli(monkeypatch, *OMI2, "trainer.learning_rate=2e-6", f"hydra.run.dir={tmp_path / 'c'}") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("rlexp: error: run_name='omi2-r1': JobSet omi2-r1 already exists in loopback/default")
    assert "another config" in err and "rlexp.jobs cancel omi2-r1" in err
    assert sum(m == "POST" for m, _ in api.requests) == posts
    assert api.jobsets[("default", "omi2-r1")]["metadata"]["annotations"]["rlexp.dev/spec-hash"]


def test_a_sweep_keeps_unique_suffixes(tmp_path: Path, make_launcher: object) -> None:
    launcher = make_launcher(tmp_path, *OMI2, "hydra.launcher.dry_run=true")  # type: ignore[operator]
    jobs = [["experiment=gemma4_e4b_omi2", "run_name=omi2-r1", f"seed={s}"] for s in (0, 1)]
    launcher.launch(jobs, initial_job_idx=0)
    names = [yaml.safe_load((tmp_path / str(i) / "jobset.yaml").read_text())["metadata"]["name"] for i in (0, 1)]
    assert len(set(names)) == 2 and all(n.startswith("omi2-r1-") and len(n) <= 22 for n in names)


@pytest.mark.parametrize(
    ("run_name", "verbatim"),
    [("omi2-r1", True), ("a" * 22, True), ("a" * 23, False), ("gemma4_e4b-arith-grpo", False), ("1run", False)],
)
def test_only_valid_names_are_used_verbatim(run_name: str, verbatim: bool) -> None:
    name = jobset_name(run_name, ["seed=1"], single=True)
    assert (name == run_name) is verbatim and len(name) <= 22
    assert jobset_name(run_name, ["seed=1"], single=False) != run_name  # a sweep's job
    assert jobset_name(run_name, ["seed=1"], "team", single=True).startswith("team-")  # name_prefix wins


def test_pathways_images_pinned_and_proxy_flags_reach_the_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("RLEXP_IMAGE", raising=False)
    assert run_cli(monkeypatch, *OMI2, "hydra.launcher.dry_run=true", f"hydra.run.dir={tmp_path / 'a'}") == 0
    out = capsys.readouterr().out  # a single launch's dry run prints its cost estimate, no sweep's
    assert "rlexp: cost estimate for gemma4_e4b on v6e-32: 500 steps x" in out and "chip-hours x $2.70" in out
    assert "for the sweep" not in out
    assert yaml.safe_load((tmp_path / "a" / "jobset.yaml").read_text())["kind"] == "JobSet"
    head = _head(yaml.safe_load((tmp_path / "a" / "jobset.yaml").read_text()))
    assert head["containers"][0]["image"] == "rlexp:latest"  # a dry run may use the placeholder (see below)
    sidecars = {c["name"]: c for c in head["initContainers"]}
    js = yaml.safe_load((tmp_path / "a" / "jobset.yaml").read_text())
    (worker,) = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"]
    assert sidecars["pathways-proxy"]["image"] == SEED_PROXY_IMAGE and "@sha256:6342a3ca" in SEED_PROXY_IMAGE
    assert sidecars["pathways-rm"]["image"] == worker["image"] == SEED_SERVER_IMAGE
    assert "@sha256:d03068b3" in SEED_SERVER_IMAGE
    proxy_args = sidecars["pathways-proxy"]["args"]
    assert proxy_args[3:] == list(SEED_PROXY_XLA_FLAGS)  # one element per flag, after port, RM and scratch
    assert "--xla_tpu_scoped_vmem_limit_kib=65536" in proxy_args

    over = [
        "hydra.launcher.server_image=registry.example/pw/server:jax-0.10",
        "hydra.launcher.proxy_image=null",
        "hydra.launcher.pathways_version=v2",
        'hydra.launcher.proxy_xla_flags=["xla_tpu_dvfs_p_state=7","--xla_tpu_pcie_bandwidth_multiplier=0.03"]',
    ]
    assert run_cli(monkeypatch, *OMI2, "hydra.launcher.dry_run=true", *over, f"hydra.run.dir={tmp_path / 'b'}") == 0
    js = yaml.safe_load((tmp_path / "b" / "jobset.yaml").read_text())
    sidecars = {c["name"]: c for c in _head(js)["initContainers"]}
    (worker,) = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"]
    assert sidecars["pathways-proxy"]["image"] == "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:v2"
    assert sidecars["pathways-rm"]["image"] == worker["image"] == "registry.example/pw/server:jax-0.10"
    assert sidecars["pathways-proxy"]["args"][3:] == [
        "--xla_tpu_dvfs_p_state=7",
        "--xla_tpu_pcie_bandwidth_multiplier=0.03",
    ]


def test_a_flag_string_with_spaces_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    flags = "hydra.launcher.proxy_xla_flags=['--xla_a=1 --xla_b=2']"  # the seeds' one-string form
    assert run_cli(monkeypatch, *OMI2, "hydra.launcher.dry_run=true", flags, f"hydra.run.dir={tmp_path}") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rlexp: error: hydra.launcher.proxy_xla_flags=")
    assert not (tmp_path / "jobset.yaml").exists()


def test_submitting_the_placeholder_image_is_refused(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv("RLEXP_IMAGE", raising=False)
    assert run_cli(monkeypatch, *OMI2, f"hydra.run.dir={tmp_path / 'a'}") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("rlexp: error: hydra.launcher.image='rlexp:latest': the placeholder")
    assert not api.requests  # refused before the cluster is contacted
    # a pushed image may be submitted; a dry run may use the placeholder: test_pathways_images_pinned_and_...
    assert run_cli(monkeypatch, *OMI2, f"hydra.launcher.image={TEST_IMAGE}", f"hydra.run.dir={tmp_path / 'c'}") == 0
    assert _head(api.jobsets[("default", "omi2-r1")])["containers"][0]["image"] == TEST_IMAGE


def test_launch_dry_run_prints_each_run_and_the_sweep(
    tmp_path: Path, make_launcher: object, capsys: pytest.CaptureFixture
) -> None:
    base = ["experiment=gemma4_e4b_omi2", "cost.step_time_s=36"]
    launcher = make_launcher(tmp_path, *base, "hydra.launcher.dry_run=true")  # type: ignore[operator]
    launcher.launch([[*base, "trainer.max_steps=100"], [*base, "trainer.max_steps=200"]], initial_job_idx=0)
    out = capsys.readouterr().out
    assert "rlexp: cost estimate for gemma4_e4b on v6e-32: 100 steps x 36 s" in out
    assert "200 steps x 36 s [cost.step_time_s] = 2 h x 32 chips = 64 chip-hours x $2.70 = $172.80" in out
    assert "rlexp: cost estimate for the sweep: 2 runs, 96.0 chip-hours, $259.20" in out


# the launcher's env wins over the preset's
ENV_OVER = "+hydra.launcher.env.TOKENIZERS_PARALLELISM=off"


def _seed_dry_run(preset: str, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The preset's JobSet, rendered by `python -m rlexp experiment=<preset> hydra.launcher.dry_run=true`."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    args = [f"experiment={preset}", "hydra.launcher.dry_run=true", ENV_OVER, f"hydra.run.dir={run_dir}"]
    assert run_cli(monkeypatch, *args) == 0
    return yaml.safe_load((run_dir / "jobset.yaml").read_text())


def _check_process_env(js: dict, expected: dict) -> None:
    (rlexp,) = [c for c in _head(js)["containers"]]
    names = [e["name"] for e in rlexp["env"]]
    assert len(names) == len(set(names))  # one entry a variable
    env = {e["name"]: e["value"] for e in rlexp["env"] if "value" in e}
    assert {k: env.get(k) for k in expected} == expected and env["ENABLE_PATHWAYS_PERSISTENCE"] == "1"
    assert env["TOKENIZERS_PARALLELISM"] == "off" and env["JAX_PLATFORMS"] == "proxy"


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("gemma4_e4b_omi2", {"RPA_D_BLOCK_SIZES": "1,1024,1,512", "VLLM_ENGINE_READY_TIMEOUT_S": "7200"}),
        ("gpt_oss_20b_gsm8k", {"MODEL_IMPL_TYPE": "flax_nnx", "SKIP_JAX_PRECOMPILE": "1"}),
    ],  # the MoE seeds' env: test_the_moe_recipes_render_v7x_jobsets, on the same dry run
)
def test_the_seeds_process_env_reaches_the_rlexp_container(
    preset: str, expected: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_process_env(_seed_dry_run(preset, tmp_path, monkeypatch), expected)


@pytest.mark.parametrize(
    ("preset", "server_digest", "experts", "env"),
    [
        (
            "gemma4_26b_a4b_omi2",
            "@sha256:d03068b3",
            8,
            {"RPA_D_BLOCK_SIZES": "1,1024,1,512", "TPU_BACKEND_TYPE": "jax"},
        ),
        ("qwen3_30b_a3b_omi2", "@sha256:d03068b3", 1, {"SKIP_JAX_PRECOMPILE": "1"}),
    ],
)
def test_the_moe_recipes_render_v7x_jobsets(
    preset: str, server_digest: str, experts: int, env: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MaxText's two MoE scripts on v7x 4x4x4: a head and 16 workers of 4 chips each, pinned Pathways images, the
    seed's process env in the rlexp container."""
    js = _seed_dry_run(preset, tmp_path, monkeypatch)
    _check_process_env(js, env)
    worker_job = js["spec"]["replicatedJobs"][1]["template"]["spec"]
    pod = worker_job["template"]["spec"]
    (worker,) = pod["containers"]
    assert worker_job["completions"] == 16 and worker["resources"]["limits"]["google.com/tpu"] == "4"
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu7x"
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4x4"
    assert server_digest in worker["image"]
    from rlexp.train.cluster import rollout_config

    rc = rollout_config(compose_conf([f"experiment={preset}"]), SimpleNamespace(eos_token_id=1))
    assert rc.expert_parallel_size == experts and rc.data_parallel_size * rc.tensor_parallel_size * experts == 64
    assert rc.rollout_vllm_kwargs == ({"enable_expert_parallel": True} if experts > 1 else {})
