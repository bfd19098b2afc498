"""Two builds of a builtin tiny model by scripts/make_tiny_model.py, for the tests that it rebuilds them byte for
byte (tests/envs/test_tiny_rg.py, tests/tools/test_tiny_tools.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlexp.config.schema import CompileCacheConfig
from tests.helpers import REPO, rlexp_env


def build_twice(model: str, tmp_path: Path, *overrides: str) -> tuple[Path, Path]:
    """`scripts/make_tiny_model.py --model <model> --steps 2 <overrides>` into tmp/a, then into tmp/b; returns both
    folders. One after the other, with the JAX compilation cache the runs use (the script sets none): the second
    build loads the first's compiled warm-up step (6 of its 10 CPU-s), then trains and writes afresh."""
    cache = Path(CompileCacheConfig().dir).expanduser()
    env = rlexp_env()
    env |= {"JAX_COMPILATION_CACHE_DIR": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}  # fmt: skip
    outs = (tmp_path / "a", tmp_path / "b")
    for out in outs:
        cmd = [sys.executable, "scripts/make_tiny_model.py", "--model", model, "--steps", "2", "--out", str(out)]
        proc = subprocess.run([*cmd, *overrides], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    return outs
