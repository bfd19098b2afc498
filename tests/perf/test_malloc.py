"""rlexp.perf.malloc: a training process whose activations are large sets glibc up so that a large block freed
by a worker thread is reused by the next allocation, already faulted in, as XLA:CPU's per-execution buffers
are; a small one keeps glibc's defaults (glibc only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlexp.perf.malloc import _glibc
from tests.helpers import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_glibc() is None, reason="glibc's mallopt only (Linux); elsewhere nothing is set"),
]

# In a fresh interpreter: set up as `setup` says, then in a new thread (as XLA's workers allocate) malloc 256 MB,
# touch every page, free it, twice; print the minor page faults of the second round.
PROBE = """
import ctypes, json, resource, sys, threading
{setup}
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 256 << 20
faults = []
def round_trip():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
for _ in range(2):
    t = threading.Thread(target=round_trip)
    t.start()
    t.join()
print(json.dumps(faults))
"""
# What a training process does first: rlexp.train.run.setup_jax, on the compute workload of benchmarks/README.md
# (180 MB of activations) or the embedded default's (8 MB).
SETUP = """
from tests.helpers import compose_conf
from rlexp.train.run import setup_jax
setup_jax(compose_conf(["compile_cache.enabled=false", {overrides}]))
"""
COMPUTE = [
    "model.num_layers=6",
    "model.embed_dim=512",
    "model.hidden_dim=1664",
    "model.num_heads=8",
    "model.num_kv_heads=4",
    "model.head_dim=64",
    "model.max_context=128",
    "model.dtype=bfloat16",
    "trainer.batch_size=4",
    "trainer.max_completion_tokens=64",
]


def _faults(setup: str, **env: str) -> list[int]:
    code = PROBE.format(setup=setup)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


PAGES = (256 << 20) // 4096


def _setup(overrides: list[str]) -> str:
    return SETUP.format(overrides=", ".join(repr(o) for o in overrides))


def test_a_large_model_on_cpu_reuses_a_freed_block_without_faults() -> None:
    first, second = _faults(_setup(COMPUTE))
    assert first >= PAGES // 2  # the first round faults the block in
    assert second < PAGES // 50, (first, second)  # the second reuses it


@pytest.mark.parametrize(
    ("overrides", "env"),
    [([], {}), ([*COMPUTE, "perf.patches=[token_rows]"], {})],
    ids=["small_model", "opted_out"],
)
def test_otherwise_glibc_faults_the_block_in_every_time(overrides: list[str], env: dict[str, str]) -> None:
    """glibc's defaults: the block is mapped afresh each round (the embedded default's buffers are small enough
    for glibc to reuse, and one shared arena slowed its cold run)."""
    first, second = _faults(_setup(overrides), **env)
    assert first >= PAGES // 2 and second >= PAGES // 2, (first, second)
