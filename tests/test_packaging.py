"""The package's metadata as pip sees it: the wheel built from what the Dockerfile copies carries the Apache-2.0
license (expression and file), the `rlexp` console script, classifiers and project URLs."""

from __future__ import annotations

import email
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.test_dockerfile import instructions


def test_the_license_file_is_the_apache_2_text() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert (
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text and "END OF TERMS AND CONDITIONS" in text
    )
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    # with an SPDX expression, setuptools refuses `License ::` classifiers: the expression is the one statement
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]


@pytest.mark.slow
def test_the_image_build_context_makes_a_wheel_with_the_metadata(tmp_path: Path) -> None:
    """`pip install .` in the image sees only the files COPY put there: a `license-files` entry it lacks fails
    the build."""
    context = tmp_path / "context"
    context.mkdir()
    for word, args in instructions():
        if word == "COPY":
            *sources, dest = shlex.split(args)
            for source in sources:
                target = context / (source if dest in ("./", ".") else dest)
                if (REPO / source).is_dir():
                    shutil.copytree(REPO / source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(REPO / source, target)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."]
    r = subprocess.run(cmd, cwd=context, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("rlexp-*.whl")
    with zipfile.ZipFile(wheel) as z:
        info = next(n.rsplit("/", 1)[0] for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(z.read(f"{info}/METADATA"))
        entry_points = z.read(f"{info}/entry_points.txt").decode()
        assert z.read(f"{info}/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    assert meta["Author"] == "rlexp developers" and "GRPO" in meta["Keywords"].split(",")
    classifiers = meta.get_all("Classifier")
    for c in ("Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.12",
              "Topic :: Scientific/Engineering :: Artificial Intelligence"):  # fmt: skip
        assert c in classifiers, c
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Issues"}
    assert "[console_scripts]\nrlexp = rlexp.console:main" in entry_points
