"""In-job initialisation: Pathways through pathwaysutils, multi-controller JAX through jax.distributed."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import types
from pathlib import Path

import pytest

from rlexp.launch.jobset_checks import SCHEMA_PATH
from rlexp.train.distributed import initialize
from tests.helpers import REPO, SHORT, sigterm_at_progress, sigterm_in_teardown


def test_pathways_pod_initialises_pathwaysutils(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    fake = types.ModuleType("pathwaysutils")
    fake.initialize = lambda: calls.append("init")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pathwaysutils", fake)
    assert initialize({"RLEXP_IN_CLUSTER": "gke", "RLEXP_PATHWAYS": "1"}) == "pathways"
    assert calls == ["init"]


def test_multicontroller_pod_initialises_jax_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    import jax

    seen: list[tuple] = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a: seen.append(a))
    env = {"RLEXP_IN_CLUSTER": "gke", "JAX_COORDINATOR_ADDRESS": "js-slice-job-0-0.js", "JAX_PROCESS_COUNT": "4"}
    assert initialize({**env, "JAX_PROCESS_ID": "2"}) == "distributed"
    assert seen == [("js-slice-job-0-0.js:8476", 4, 2)]


def test_vendored_jobset_schema_is_the_reference_copy() -> None:
    schema = json.loads(gzip.open(SCHEMA_PATH).read())
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert "replicatedJobs" in schema["properties"]["spec"]["properties"]
    reference = REPO.parent / "shared" / "reference" / SCHEMA_PATH.name
    if reference.exists():  # the shared reference set, next to the repository when present
        assert (
            hashlib.sha256(Path(reference).read_bytes()).digest() == hashlib.sha256(SCHEMA_PATH.read_bytes()).digest()
        )


def test_a_pod_stopped_by_sigterm_exits_with_a_status_the_jobset_restarts() -> None:
    """tests/distributed/test_two_processes.py stops two real processes; this pins the status to the manifest's."""
    from rlexp.launch.manifest import RESTART_EXIT_CODES
    from rlexp.train.run import POD_STOPPED_EXIT

    assert POD_STOPPED_EXIT == 143 and POD_STOPPED_EXIT in RESTART_EXIT_CODES


@pytest.mark.slow
def test_the_pods_command_stopped_by_sigterm_exits_143_even_if_a_sigterm_arrives_as_it_ends(tmp_path: Path) -> None:
    """The pod's `python -m rlexp`, evicted mid-run: a checkpoint, one line, 143. A second SIGTERM during interpreter
    teardown (in a JobSet, the pod's own when a peer stopped the run first) must not turn 143 into death by signal."""
    env = sigterm_in_teardown(tmp_path / "site", RLEXP_IN_CLUSTER="gke")
    run_dir = tmp_path / "run"
    code, rest = sigterm_at_progress(*SHORT, f"hydra.run.dir={run_dir}", step_line="rlexp: step 2/8", env=env)
    assert code == 143, rest[-2000:]
    assert rest.strip().splitlines()[-1].startswith(f"rlexp: error: {run_dir}: interrupted at step")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
