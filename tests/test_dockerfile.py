"""The Dockerfile: parses, installs this project with the right extras, runs as non-root, bakes in no secrets,
and its entrypoint is the command the GKE manifests run. (Images cannot be built in CI: no registry access.)"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from rlexp.launch.manifest import COMMAND

REPO = Path(__file__).resolve().parent.parent
SECRET_NAMES = re.compile(r"TOKEN|API_KEY|SECRET|PASSWORD|CREDENTIAL", re.I)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def test_parses_and_uses_known_instructions() -> None:
    ins = instructions()
    known = {"ARG", "FROM", "ENV", "RUN", "WORKDIR", "COPY", "USER", "ENTRYPOINT", "CMD", "LABEL"}
    assert ins and all(word in known for word, _ in ins), [w for w, _ in ins if w not in known]
    assert [w for w, _ in ins].count("FROM") == 1


def test_entrypoint_is_what_the_manifests_run() -> None:
    (entry,) = [json.loads(args) for word, args in instructions() if word == "ENTRYPOINT"]
    assert entry == COMMAND == ["python", "-m", "rlexp"]


def test_runs_as_a_non_root_user_after_installing() -> None:
    words = [w for w, _ in instructions()]
    users = [a for w, a in instructions() if w == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert max(i for i, w in enumerate(words) if w == "RUN") < max(i for i, w in enumerate(words) if w == "USER")


def test_copies_what_the_project_needs_and_installs_known_extras() -> None:
    copies = [shlex.split(a)[:-1] for w, a in instructions() if w == "COPY"]
    sources = {s for c in copies for s in c}
    assert {"pyproject.toml", "rlexp", "launchers", "conf"} <= sources
    assert all((REPO / s).exists() for s in sources)
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    (default_extras,) = [a.split("=", 1)[1] for w, a in instructions() if w == "ARG" and a.startswith("EXTRAS=")]
    assert set(default_extras.split(",")) <= extras and "tpu" in extras
    run = " ".join(a for w, a in instructions() if w == "RUN")
    assert '".[${EXTRAS},tpu]"' in run and "jax[cuda12]==" in run  # TPU and CUDA variants by build arg
    assert run.count("gcsfs") == 3  # every variant writes gs:// run files through fsspec
    env = " ".join(a for w, a in instructions() if w == "ENV")
    assert "RLEXP_CONF_DIR=/opt/rlexp/conf" in env  # conf/ is not inside the installed package


def test_no_secrets_baked_in() -> None:
    for word, args in instructions():
        if word in ("ENV", "ARG", "LABEL"):
            assert not SECRET_NAMES.search(args), args
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert ".venv" in ignore and ".git" in ignore and any("kube" in line for line in ignore)


@pytest.mark.slow
def test_project_builds_a_wheel_with_the_launcher_plugin(tmp_path: Path) -> None:
    """What `pip install .` in the image installs: rlexp, the Hydra plugin and the JobSet schema."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("rlexp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "rlexp/__main__.py" in names and "rlexp/launch/gke.py" in names
    assert "hydra_plugins/rlexp_launchers/gke_launcher.py" in names
    assert "hydra_plugins/__init__.py" not in names  # namespace package shared with other Hydra plugins
    assert any(n.startswith("rlexp/launch/schemas/") and n.endswith(".json.gz") for n in names)
    assert "rlexp/perf/decode_attention.cc" in names  # the CPU decode-attention kernel builds from it
