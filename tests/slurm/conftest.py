"""A real one-node Slurm for the tests that submit jobs: scripts/local_slurm.sh, once per test session.

The cluster is brought up when the first test asks for it (installing the Debian packages on a fresh machine,
as root) and taken down at the end of the session, unless it was up before the session began: then it is
someone else's and is left running.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "local_slurm.sh"


def _script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def local_slurm() -> Iterator[str]:
    """The partition of a running one-node Slurm (`local`)."""
    started = _script("status").returncode != 0
    if started:
        assert os.geteuid() == 0, "the local Slurm runs as root: run the Slurm tests as root (CI does)"
        up = _script("up")
        assert up.returncode == 0, f"scripts/local_slurm.sh up failed:\n{up.stdout}{up.stderr}"
    yield "local"
    if started:
        _script("down", timeout=120)
