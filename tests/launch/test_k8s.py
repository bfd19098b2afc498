"""Submission, duplicates, status, logs and cancel against a Kubernetes API server on loopback.

The real `kubernetes` client talks HTTP to tests/launch/fake_apiserver.py through a generated kubeconfig.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.errors import RlexpError
from rlexp.jobs import main as jobs_main
from tests.launch.conftest import TEST_IMAGE, run_cli
from tests.launch.fake_apiserver import FakeApiServer

SUBMIT = [
    "model=gemma4_e4b",
    "slice=v6e-32",
    "hydra.launcher.output_root=gs://bucket/rlexp",
    f"hydra.launcher.image={TEST_IMAGE}",  # submitting the placeholder rlexp:latest is refused
]


def _submit(monkeypatch: pytest.MonkeyPatch, run_dir: Path, *extra: str) -> int:
    return run_cli(monkeypatch, *SUBMIT, f"hydra.run.dir={run_dir}", *extra)


def test_submit_duplicate_status_logs_cancel(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    assert _submit(monkeypatch, run_dir) == 0
    out = capsys.readouterr().out
    assert len(api.jobsets) == 1
    ((ns, name), obj) = next(iter(api.jobsets.items()))
    assert ns == "default" and f"{name} submitted [loopback/default]" in out
    args = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == [f"output_dir=gs://bucket/rlexp/{name}", "hydra.mode=RUN"]
    record = json.loads((run_dir / "launcher.json").read_text())
    assert (record["launcher"], record["handle"], record["context"], record["state"]) == (
        "gke",
        name,
        "loopback",
        "submitted",
    )

    # the same command again: found, not duplicated
    assert _submit(monkeypatch, tmp_path / "run2") == 0
    assert "already exists" in capsys.readouterr().out
    assert len(api.jobsets) == 1
    assert [m for m, p in api.requests if p.endswith("/jobsets")].count("POST") == 2

    assert jobs_main(["status", str(run_dir)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["JOB", "JOBSET", "STATE", "RESTARTS", "AGE"]
    assert table[1].split()[:4] == [".", name, "Pending", "0"]
    api.set_state(name, "Failed", restarts=2)
    assert jobs_main(["status", str(run_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[2:4] == ["Failed", "2"]

    assert jobs_main(["logs", name, "--no-follow"]) == 0
    assert "rlexp: training" in capsys.readouterr().out

    assert jobs_main(["cancel", str(run_dir)]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert not api.jobsets
    assert jobs_main(["cancel", name]) == 0
    assert "not found" in capsys.readouterr().out


def test_sweep_status_and_cancel_by_sweep_dir(
    api: FakeApiServer, tmp_path: Path, make_launcher: object, capsys: pytest.CaptureFixture
) -> None:
    sweep = tmp_path / "sweep"
    launcher = make_launcher(sweep, *SUBMIT)  # type: ignore[operator]
    rets = launcher.launch([[*SUBMIT[:2], f"seed={s}"] for s in range(3)], initial_job_idx=0)
    assert [r.status.name for r in rets] == ["COMPLETED"] * 3
    assert {r.return_value["state"] for r in rets} == {"submitted"}
    assert len(api.jobsets) == 3
    capsys.readouterr()
    assert jobs_main(["status", str(sweep)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["0", "1", "2"]
    assert jobs_main(["cancel", str(sweep)]) == 0
    assert not api.jobsets


def test_forbidden_is_one_line_with_context_and_dry_run_hint(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    api.forbidden = True
    assert _submit(monkeypatch, tmp_path / "run") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "forbidden" in err and "'loopback'" in err and "hydra.launcher.dry_run=true" in err


def test_unreachable_api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    server = FakeApiServer()  # bound, never serving: connections are refused once closed
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig", context="dead")
    server.httpd.server_close()
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert _submit(monkeypatch, tmp_path / "run") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unreachable" in err and "'dead'" in err and "dry_run=true" in err


def test_no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert _submit(monkeypatch, tmp_path / "run", "hydra.launcher.context=prod") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "kubeconfig" in err and "'prod'" in err and "dry_run=true" in err
    assert not (tmp_path / "run" / "jobset.yaml").exists()


def test_submit_needs_an_output_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv("RLEXP_OUTPUT_ROOT", raising=False)
    assert run_cli(monkeypatch, "model=gemma4_e4b", "slice=v6e-32", f"hydra.run.dir={tmp_path}") == 2
    assert "hydra.launcher.output_root" in capsys.readouterr().err


def test_jobs_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    assert jobs_main(["status", str(tmp_path / "empty")]) == 2
    assert "no launcher.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        jobs_main(["frobnicate"])
    assert isinstance(RlexpError("x"), Exception)


# The status and cancel of a dry run, with no cluster: tests/launch/test_launcher.py's
# test_single_run_dry_run_writes_a_valid_jobset, on its dry run.


def test_resumed_sweep_does_not_resubmit_completed_jobs(
    api: FakeApiServer, tmp_path: Path, make_launcher: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    # gs:// served from memory for this test only: the launcher reads run dirs through fsspec
    monkeypatch.setitem(importlib.import_module("fsspec.registry")._registry, "gs", MemoryFileSystem)
    sweep = tmp_path / "sweep"
    launcher = make_launcher(sweep, *SUBMIT, "sweep.resume=true")  # type: ignore[operator]
    jobs = [[*SUBMIT[:2], "sweep.resume=true", f"seed={s}"] for s in range(2)]  # as Hydra's sweeper passes them
    first = launcher.launch(jobs, initial_job_idx=0)
    done_dir = first[0].return_value["output_dir"]
    with fsspec.open(f"{done_dir}/summary.json", "w") as f:
        json.dump({"status": "completed", "eval": {"after": {"pass_at_1": 0.75}}}, f)
    api.jobsets.clear()  # e.g. JobSets garbage-collected after completion

    again = launcher.launch(jobs, initial_job_idx=0)
    assert [r.status.name for r in again] == ["COMPLETED", "COMPLETED"]
    assert again[0].return_value == 0.75
    assert len(api.jobsets) == 1  # only the job that had not completed was submitted again
    MemoryFileSystem.store.clear()


def test_status_of_a_missing_dir_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert jobs_main(["status", "/no/such/sweep"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "rlexp: error: target=/no/such/sweep: no such run or sweep dir, and not a JobSet name; check the path"
    )
