"""The training session as `python -m rlexp` runs it: evals reuse their compiled programs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, SHORT

pytestmark = pytest.mark.slow


def test_evals_before_during_and_after_training_trace_each_program_once(tmp_path: Path) -> None:
    """jit keys its traces on the active mesh context: an eval before training outside the actor mesh (which the
    mid-run evals run under) traced and loaded every eval program a second time at the first mid-run eval."""
    out = subprocess.run(
        [sys.executable, "-m", "rlexp", *SHORT, f"output_dir={tmp_path}", f"compile_cache.dir={tmp_path}/cache"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env={**os.environ, "JAX_LOG_COMPILES": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    log = out.stdout + out.stderr  # JAX's log lines go through Hydra's console handler (stdout)
    decodes = re.findall(r"Compiling jit\(_decode_fn\) with global shapes and types \((.*?)\)\. Argument", log)
    assert decodes, log[-2000:]
    batch_rows = sorted({re.findall(r"int32\[(\d+),", d)[0] for d in decodes}, key=int)
    # training rollouts (8 prompts x 8), greedy eval (16 prompts), sampled eval (16 x 2): evals before, at step 4
    # and after all hit the same three programs
    assert batch_rows == ["16", "32", "64"], batch_rows
    assert len(decodes) == 3, f"{len(decodes)} decode traces for 3 shapes"
