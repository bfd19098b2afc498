"""Helpers for the sweep tests that run `python -m rlexp -m …` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.helpers import run_rlexp


def env() -> dict[str, str]:
    """The test's environment without any wandb settings: wandb runs offline, quietly."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out.update(WANDB_SILENT="true", HYDRA_FULL_ERROR="0", PYTHONUNBUFFERED="1")
    return out


def rlexp(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_rlexp(*args, env=env(), timeout=timeout)


def read(path: Path) -> dict:
    return json.loads(path.read_text())
