"""Every command, fed bad input, ends with one line on stderr (`rlexp: error: ...` naming what the user set),
exit status 2 (usage) or 1 (run time), no traceback, and a run dir it refused left byte for byte as it was."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli.cases import CASES, SECRET, SLOW_CASES, Case
from tests.cli.conftest import TRAIN
from tests.helpers import REPO, rlexp_command, rlexp_env

FIXTURE_RUNS = REPO / "tests" / "fixtures" / "runs" / "lr_seed"


def tree_hash(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below `root` (a file added, removed or changed shows)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _places(request: pytest.FixtureRequest, case: Case, tmp: Path) -> dict[str, str]:
    text = " ".join(case.argv) + case.says
    places = {"tmp": str(tmp), "fixture_runs": str(FIXTURE_RUNS)}
    for name, fixture in (
        ("files", "bad_files"),
        ("models", "bad_models"),
        ("busy", "busy_port"),
        ("closed", "closed_port"),
        ("run", "trained_run"),
        ("damaged", "damaged_run"),
        ("stale", "stale_run"),
    ):
        if "{" + name + "}" in text:  # build only what the case needs (the trained run takes ~20 s)
            places[name] = str(request.getfixturevalue(fixture))
    return places


def _fill(text: str, places: dict[str, str]) -> str:
    for name, value in places.items():  # not str.format: `${nosuch.key}` must reach the command as typed
        text = text.replace("{" + name + "}", value)
    return text


def _command(case: Case, places: dict[str, str]) -> list[str]:
    args: list[str] = []
    for arg in case.argv:
        args += TRAIN if arg == "{train}" else [_fill(arg, places)]
    if args[0].endswith(".sh"):
        return ["bash", str(REPO / args[0]), *args[1:]]
    if args[0].endswith(".py"):
        return [sys.executable, str(REPO / args[0]), *args[1:]]
    return rlexp_command(*args[1:], module=args[0])


def _run(cmd: list[str], cwd: Path, extra: tuple[tuple[str, str], ...] = ()) -> subprocess.CompletedProcess:
    env = rlexp_env({**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}, **dict(extra)})
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300, stdin=subprocess.DEVNULL)


def check(case: Case, proc: subprocess.CompletedProcess, places: dict[str, str]) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    assert SECRET not in proc.stderr + proc.stdout, "a key given on the command line was printed"
    assert len(lines) == 1 and lines[0].startswith("rlexp: error: "), proc.stderr[-3000:]
    assert _fill(case.says, places) in lines[0], lines[0]
    assert case.fix is None or _fill(case.fix, places) in lines[0], lines[0]
    assert proc.returncode == case.code, (proc.returncode, lines[0])
    if case.check:
        CHECKS[case.check](Path(places["tmp"]))


@pytest.fixture(scope="session")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[Case, tuple[subprocess.CompletedProcess, dict[str, str]]]:
    """Every selected case of the fast table, run a few at a time (each is a ~1 s Hydra start-up)."""
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_bad_input_is_one_line"
    ]
    planned = {}
    for case in selected:
        tmp = tmp_path_factory.mktemp("case")
        places = _places(request, case, tmp)
        planned[case] = (_command(case, places), tmp, places)
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        futures = {case: pool.submit(_run, cmd, tmp, case.env) for case, (cmd, tmp, _) in planned.items()}
    return {case: (futures[case].result(), planned[case][2]) for case in planned}


def _sweep_failed(tmp: Path) -> None:
    manifest = json.loads((tmp / "sweep" / "sweep.json").read_text())
    assert manifest["state"] == "failed", manifest
    assert manifest["jobs"] and all(j["state"] == "failed" and j["error"] for j in manifest["jobs"]), manifest["jobs"]
    assert not list((tmp / "sweep").glob("*/.hydra")), "refused jobs wrote Hydra records"


def _no_sweep_json(tmp: Path) -> None:
    assert not list(tmp.rglob("sweep.json")), "a refused multirun wrote sweep.json"


def _no_secret(tmp: Path) -> None:
    leaked = [str(p) for p in tmp.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaked, f"the planted key is in {leaked}"


CHECKS = {"sweep_failed": _sweep_failed, "no_sweep_json": _no_sweep_json, "no_secret": _no_secret}


def _id(case: Case) -> str:
    return " ".join(case.argv).replace("hydra.run.dir={tmp}/run", "").strip()[:90]


def test_the_table_covers_every_command() -> None:
    commands = {c.argv[0] for c in CASES + SLOW_CASES}
    for cmd in (
        "rlexp",
        "rlexp.validate",
        "rlexp.report",
        "rlexp.export",
        "rlexp.eval",
        "rlexp.jobs",
        "rlexp.serve_reward",
    ):
        assert cmd in commands, cmd
    assert {"scripts/make_tiny_model.py", "scripts/local_slurm.sh", "rlexp.models.tiny_random"} <= commands
    assert len(CASES) + len(SLOW_CASES) >= 100
    assert len({c.argv for c in CASES + SLOW_CASES}) == len(CASES) + len(SLOW_CASES), "a case is listed twice"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_bad_input_is_one_line(case: Case, outcomes: dict) -> None:
    check(case, *outcomes[case])


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES, ids=_id)
def test_refused_command_leaves_the_run_dir(case: Case, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    places = _places(request, case, tmp_path)
    run_dir = Path(places["stale" if "stale" in places else "run"]) if case.run_dir else None
    before = tree_hash(run_dir) if run_dir else None
    check(case, _run(_command(case, places), tmp_path, case.env), places)
    if run_dir is not None:
        assert tree_hash(run_dir) == before, "a refused command changed the run dir"
