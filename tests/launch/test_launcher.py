"""The Hydra GKE launcher: discovery, dry runs (single and multirun), JobReturns, checks before rendering."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlexp.config.hardware import tpu_slice
from rlexp.jobs import main as jobs_main
from rlexp.launch.jobset_checks import check_jobset
from tests.helpers import REPO, run_rlexp
from tests.launch.conftest import run_cli


def test_plugin_is_discovered_and_registered() -> None:
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    assert "GkeLauncher" in [p.__name__ for p in Plugins.instance().discover(Launcher)]
    assert "gke.yaml" in ConfigStore.instance().list("hydra/launcher")
    assert not (REPO / "launchers" / "hydra_plugins" / "__init__.py").exists()  # namespace package


@pytest.mark.parametrize(
    ("model", "slice_name", "topology"), [("gemma4_e4b", "v6e-32", "4x8"), ("gpt_oss_20b", "v5p-64", "2x4x4")]
)
def test_single_run_dry_run_writes_a_valid_jobset(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    model: str,
    slice_name: str,
    topology: str,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))  # a dry run, its status and cancel need no cluster
    run_dir = tmp_path / "run"
    rc = run_cli(
        monkeypatch, f"model={model}", f"slice={slice_name}", "hydra.launcher.dry_run=true", f"hydra.run.dir={run_dir}"
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert str(run_dir / "jobset.yaml") in out
    assert "memory per chip" in out
    js = yaml.safe_load((run_dir / "jobset.yaml").read_text())
    check_jobset(js, tpu_slice(slice_name))
    worker = js["spec"]["replicatedJobs"][1]["template"]["spec"]
    assert worker["completions"] == 8
    assert worker["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == topology
    assert (run_dir / "config.resolved.yaml").exists() and (run_dir / "launcher.json").exists()
    assert not (run_dir / "metrics.jsonl").exists()  # nothing trained on this machine
    capsys.readouterr()
    assert jobs_main(["status", str(run_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[2] == "DryRun"
    assert jobs_main(["cancel", str(run_dir)]) == 0
    assert "never submitted" in capsys.readouterr().out


def test_multirun_3x2_gives_6_distinct_manifests(tmp_path: Path, make_launcher: object) -> None:
    sweep = tmp_path / "sweep"
    launcher = make_launcher(sweep, "model=gemma4_e4b", "slice=v6e-32", "hydra.launcher.dry_run=true")  # type: ignore[operator]
    # as Hydra's sweeper passes them: every task override of the command line, one value per swept key
    jobs = [
        ["model=gemma4_e4b", "slice=v6e-32", f"trainer.learning_rate={lr}", f"seed={s}"]
        for lr in ("1e-06", "2e-06", "3e-06")
        for s in (0, 1)
    ]
    rets = launcher.launch(jobs, initial_job_idx=0)
    assert [r.status.name for r in rets] == ["COMPLETED"] * 6
    texts = [(sweep / str(i) / "jobset.yaml").read_text() for i in range(6)]
    assert len(set(texts)) == 6
    names = {yaml.safe_load(t)["metadata"]["name"] for t in texts}
    assert len(names) == 6 and all(len(n) <= 22 for n in names)
    for i, r in enumerate(rets):
        assert r.return_value == str(sweep / str(i) / "jobset.yaml")
        assert r.overrides == jobs[i]
        js = yaml.safe_load(texts[i])
        args = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:4] == jobs[i]
        _assert_the_pod_s_plan(launcher, js, args)


def _assert_the_pod_s_plan(launcher: object, jobset: dict, args: list[str]) -> None:
    """The plan in the JobSet (`RLEXP_PLAN`) is the one the pod's command replays: made for the config the pod
    composes from its args (Hydra's own composition; the launcher's may share one between jobs) and its run dir."""
    import json

    from omegaconf import OmegaConf, open_dict

    from rlexp.train.plan import SUBMITTED, config_hash

    (container,) = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    plan = json.loads(env["RLEXP_PLAN"])
    assert set(plan) == set(SUBMITTED) and plan["action"] == "train" and plan["memory"] and plan["cost"]
    assert f"output_dir={plan['run_dir']}" in args and plan["run_dir"] == env["RLEXP_OUTPUT_DIR"]
    loader = launcher.hydra_context.config_loader  # type: ignore[attr-defined]
    pod = loader.load_sweep_config(launcher.config, [a for a in args if not a.startswith("hydra.")])  # type: ignore[attr-defined]
    with open_dict(pod):
        pod.pop("hydra")
    assert plan["config_hash"] == config_hash(OmegaConf.to_container(pod, resolve=True))


@pytest.mark.slow
def test_fast_composition_equals_hydras(tmp_path: Path, make_launcher: object) -> None:
    """Jobs sharing a composition get exactly the config Hydra composes for them one by one."""
    from omegaconf import OmegaConf, open_dict

    from rlexp.launch.compose import SweepComposer

    launcher = make_launcher(tmp_path, "model=gemma4_e4b", "slice=v6e-32", "hydra.launcher.dry_run=true")  # type: ignore[operator]
    composer = SweepComposer(launcher.hydra_context.config_loader, launcher.config)
    cases = [
        ["model=gemma4_e4b", "slice=v6e-32", "trainer.learning_rate=3e-06", "seed=4"],
        [
            "model=gemma4_e4b",
            "slice=v6e-32",
            "trainer.learning_rate=1e-06",
            "seed=5",
            "trainer.max_completion_tokens=16",
        ],
        ["model=gpt_oss_20b", "slice=v6e-32", "trainer.beta=0.0"],
        ["model=gemma4_e4b", "slice=v6e-32", "slice.mesh.tp=2", "trainer.beta=0.0"],
        # inputs of interpolations (devices = chips x num_slices): re-resolved for the job
        ["model=gemma4_e4b", "slice=v6e-32", "slice.num_slices=2", "seed=1"],
        # a list item and a leaf whose default is null
        ["model=gemma4_e4b", "slice=v6e-32", "reward.functions.0.weight=2.0", "trainer.top_k=50"],
    ]
    for i, overrides in enumerate(cases):
        fast = composer.compose(overrides, i)
        full = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, overrides)
        with open_dict(full):
            full.pop("hydra")
        expected = OmegaConf.to_container(full, resolve=True)
        assert fast.resolved == expected
        if "slice.num_slices=2" in overrides:
            fast_devices = fast.resolved["slice"]["devices"]
        assert OmegaConf.to_container(fast.task, resolve=True) == expected
        assert list(fast.hydra.hydra.overrides.task) == overrides
    assert fast_devices == 64
    assert composer.full_compositions == 2  # one per distinct group choice (gemma4_e4b, gpt_oss_20b)


def test_mesh_that_does_not_fit_fails_before_rendering(tmp_path: Path, make_launcher: object) -> None:
    from rlexp.errors import ConfigError

    sweep = tmp_path / "sweep"
    launcher = make_launcher(sweep, "model=gemma4_e4b", "slice=v6e-32", "hydra.launcher.dry_run=true")  # type: ignore[operator]
    with pytest.raises(ConfigError, match="slice.mesh"):
        launcher.launch(
            [["model=gemma4_e4b", "slice=v6e-32", "seed=1"], ["model=gemma4_e4b", "slice=v6e-32", "slice.mesh.tp=3"]],
            initial_job_idx=0,
        )
    assert not list(sweep.glob("*/jobset.yaml"))  # nothing rendered, not even the valid job


def test_cpu_slice_is_refused_by_the_gke_launcher(tmp_path: Path, make_launcher: object) -> None:
    from rlexp.errors import ConfigError

    launcher = make_launcher(tmp_path, "slice=cpu", "hydra/launcher=gke", "hydra.launcher.dry_run=true")  # type: ignore[operator]
    with pytest.raises(ConfigError, match="TPU slices"):
        launcher.launch([["slice=cpu", "hydra/launcher=gke", "seed=1"]], initial_job_idx=0)


def test_wait_mode_maps_jobset_conditions_to_job_returns(tmp_path: Path, make_launcher: object, api: object) -> None:
    import threading

    from tests.launch.fake_apiserver import FakeApiServer

    assert isinstance(api, FakeApiServer)
    launcher = make_launcher(  # type: ignore[operator]
        tmp_path,
        "model=gemma4_e4b",
        "slice=v6e-32",
        "hydra.launcher.wait=true",
        "hydra.launcher.poll_s=0.05",
        "hydra.launcher.output_root=gs://b/r",
    )

    def finish() -> None:  # the controller: one job completes, the other fails
        while len(api.jobsets) < 2:
            threading.Event().wait(0.02)
        names = sorted(n for _, n in api.jobsets)
        by_seed = {
            api.jobsets[("default", n)]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
                "containers"
            ][0]["args"][0]: n
            for n in names
        }
        api.set_state(by_seed["seed=1"], "Completed")
        api.set_state(by_seed["seed=2"], "Failed", restarts=1)

    t = threading.Thread(target=finish)
    t.start()
    rets = launcher.launch(
        [["seed=1", "model=gemma4_e4b", "slice=v6e-32"], ["seed=2", "model=gemma4_e4b", "slice=v6e-32"]],
        initial_job_idx=0,
    )
    t.join()
    assert [r.status.name for r in rets] == ["COMPLETED", "FAILED"]
    assert rets[0].return_value["state"] == "Completed"  # no summary reachable: the submission record
    with pytest.raises(RuntimeError, match="failed"):
        _ = rets[1].return_value


def test_unknown_slice_lists_the_valid_ones() -> None:
    r = run_rlexp("slice=v6e-33", "hydra.launcher.dry_run=true", timeout=60)
    assert r.returncode != 0
    assert "v6e-32" in r.stderr and "v5p-64" in r.stderr and "cpu" in r.stderr


def test_shared_preflight_runs_once_per_sweep(
    tmp_path: Path, make_launcher: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlexp.checks.data_preflight

    calls: list[dict] = []

    def fake_preflight(cfg: object, out_dir: str, *, allow_downloads: bool = True, **planned: dict) -> dict:
        calls.append({"out_dir": out_dir, "allow_downloads": allow_downloads, **planned})
        return {"ok": True, "checks": [{"name": "completions", "status": "skipped"}], "skipped": ["weights not here"]}

    monkeypatch.setattr(rlexp.checks.data_preflight, "preflight", fake_preflight)
    launcher = make_launcher(tmp_path, "model=gemma4_e4b", "slice=v6e-32", "hydra.launcher.dry_run=true")  # type: ignore[operator]
    rets = launcher.launch([["model=gemma4_e4b", "slice=v6e-32", f"seed={s}"] for s in range(6)], initial_job_idx=0)
    assert len(rets) == 6
    assert len(calls) == 1 and calls[0]["allow_downloads"] is False  # a dry run downloads nothing
    assert calls[0]["checked"]["total"] > 0 and calls[0]["cost"]["steps"] > 0  # the plan's: not estimated again


def test_failed_preflight_stops_the_launch(
    tmp_path: Path, make_launcher: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlexp.checks.data_preflight
    from rlexp.errors import RlexpError

    monkeypatch.setattr(
        rlexp.checks.data_preflight,
        "preflight",
        lambda cfg, out_dir, allow_downloads=True, **planned: {
            "ok": False,
            "checks": [{"name": "reward:acc", "status": "failed", "detail": "3 errors"}],
        },
    )
    launcher = make_launcher(tmp_path, "model=gemma4_e4b", "slice=v6e-32", "hydra.launcher.dry_run=true")  # type: ignore[operator]
    with pytest.raises(RlexpError, match="reward:acc: 3 errors"):
        launcher.launch([["model=gemma4_e4b", "slice=v6e-32"]], initial_job_idx=0)
    assert not list(tmp_path.glob("**/jobset.yaml"))


def test_model_that_does_not_fit_the_slice_fails_before_rendering(tmp_path: Path, make_launcher: object) -> None:
    from rlexp.errors import ConfigError

    launcher = make_launcher(tmp_path, "model=gpt_oss_20b", "slice=v5litepod-8", "hydra.launcher.dry_run=true")  # type: ignore[operator]
    with pytest.raises(ConfigError, match="does not fit"):
        launcher.launch([["model=gpt_oss_20b", "slice=v5litepod-8"]], initial_job_idx=0)
    assert not list(tmp_path.glob("**/jobset.yaml"))


def test_dry_run_record_and_kueue_labels(tmp_path: Path, make_launcher: object) -> None:
    import json

    launcher = make_launcher(  # type: ignore[operator]
        tmp_path,
        "model=gemma4_e4b",
        "slice=v6e-32",
        "hydra.launcher.dry_run=true",
        "hydra.launcher.kueue_priority_class=high",
        "hydra.launcher.queue=team-a",
    )
    launcher.launch([["model=gemma4_e4b", "slice=v6e-32"]], initial_job_idx=0)
    record = json.loads((tmp_path / "0" / "launcher.json").read_text())
    assert (
        record["state"] == "dry-run" and "output_dir" not in record and record["planned_output_dir"].startswith("gs://")
    )
    labels = yaml.safe_load((tmp_path / "0" / "jobset.yaml").read_text())["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a" and labels["kueue.x-k8s.io/priority-class"] == "high"


def test_remote_data_not_cached_here_is_skipped_not_failed(
    tmp_path: Path, make_launcher: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import rlexp.checks.data_preflight

    def offline_preflight(cfg: object, out_dir: str, *, allow_downloads: bool = True, **planned: dict) -> dict:
        checks = [
            {"name": "config", "status": "ok", "detail": ""},
            {"name": "dataset", "status": "failed", "detail": "could not be loaded from the hub or its cache"},
            {"name": "rows", "status": "failed", "detail": "no rows to score"},
        ]
        return {"ok": False, "checks": checks, "skipped": []}

    monkeypatch.setattr(rlexp.checks.data_preflight, "preflight", offline_preflight)
    ov = ["model=gemma4_e4b", "slice=v6e-32", "dataset.source=someone/hub-dataset"]
    launcher = make_launcher(tmp_path, *ov, "hydra.launcher.dry_run=true")  # type: ignore[operator]
    rets = launcher.launch([ov], initial_job_idx=0)
    assert rets[0].status.name == "COMPLETED"
    assert "dataset: someone/hub-dataset is not cached here" in capsys.readouterr().out


@pytest.mark.slow
def test_output_dirs_must_be_remote_and_distinct(tmp_path: Path, make_launcher: object) -> None:
    from rlexp.errors import ConfigError, RlexpError

    base = ["model=gemma4_e4b", "slice=v6e-32"]
    launcher = make_launcher(tmp_path, *base, "hydra.launcher.dry_run=true")  # type: ignore[operator]
    with pytest.raises(ConfigError, match="pod's local disk"):
        launcher.launch([[*base, "output_dir=/tmp/run"]], initial_job_idx=0)
    with pytest.raises(RlexpError, match="both map to output_dir gs://b/same"):
        launcher.launch([[*base, "seed=1", "output_dir=gs://b/same"], [*base, "seed=2", "output_dir=gs://b/same"]], 0)
    launcher = make_launcher(tmp_path, *base, "hydra.launcher.output_root=/local/dir")  # type: ignore[operator]
    with pytest.raises(ConfigError, match="gs://"):
        launcher.launch([base], initial_job_idx=0)


def test_plugin_import_is_light() -> None:
    """Hydra imports every plugin at start-up: ours must not pull in the Kubernetes client or JAX."""
    code = (
        "import sys, hydra_plugins.rlexp_launchers.gke_launcher; "
        "heavy = [m for m in ('kubernetes', 'jax', 'jsonschema', 'rlexp.launch.gke') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_topology_contradicting_the_slice_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    rc = run_cli(
        monkeypatch, "slice=v6e-32", "slice.topology=4x4", "hydra.launcher.dry_run=true", f"hydra.run.dir={tmp_path}"
    )
    assert rc == 2
    assert capsys.readouterr().err.strip() == "rlexp: error: slice.topology='4x4': v6e-32 has 32 chips, 4x4 has 16"


def test_job_dirs_follow_a_sweep_dir_that_depends_on_the_job(tmp_path: Path, make_launcher: object) -> None:
    """hydra.sweep.dir=.../${run_name}: a job that changes run_name lands where Hydra would put it."""
    from rlexp.launch.compose import SweepComposer

    launcher = make_launcher(tmp_path / "${run_name}", "model=gemma4_e4b", "slice=v6e-32")  # type: ignore[operator]
    composer = SweepComposer(launcher.hydra_context.config_loader, launcher.config)
    base = ["model=gemma4_e4b", "slice=v6e-32"]
    same = composer.compose([*base, "seed=3"], 0)
    other = composer.compose([*base, "trainer.algorithm=dapo", "trainer.dapo.epsilon_high=0.28"], 1)
    assert same.out_dir.parent.name.endswith("-grpo") and other.out_dir.parent.name.endswith("-dapo")
    assert other.out_dir == tmp_path / other.resolved["run_name"] / "1"


def test_wait_fails_jobs_never_admitted(tmp_path: Path, make_launcher: object, api: object) -> None:
    base = ["model=gemma4_e4b", "slice=v6e-32"]
    launcher = make_launcher(  # type: ignore[operator]
        tmp_path,
        *base,
        "hydra.launcher.wait=true",
        "hydra.launcher.poll_s=0.05",
        "hydra.launcher.admission_timeout_s=0.2",
        "hydra.launcher.output_root=gs://b/r",
    )
    (ret,) = launcher.launch([base], initial_job_idx=0)  # the fake cluster never starts it: Pending
    assert ret.status.name == "FAILED"
    with pytest.raises(RuntimeError, match="still pending after admission_timeout_s"):
        _ = ret.return_value


def test_multirun_user_error_is_one_line(tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("RLEXP_OUTPUT_ROOT", "HYDRA_FULL_ERROR")}
    r = run_rlexp(
        "-m", "model=gemma4_e4b", "slice=v6e-32", "seed=1,2", f"hydra.sweep.dir={tmp_path}", env=env, timeout=120
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("rlexp: error:")] == [
        "rlexp: error: hydra.launcher.output_root=None: set a gs:// root for run dirs (or env RLEXP_OUTPUT_ROOT), "
        "or add hydra.launcher.dry_run=true"
    ]
