"""rlexp.compat.malloc: with `python -m rlexp`'s malloc settings a large block freed by a worker thread is reused
by the next allocation, already faulted in, as XLA:CPU's per-execution buffers are (glibc only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlexp.compat.malloc import _glibc
from tests.helpers import REPO

pytestmark = pytest.mark.skipif(_glibc() is None, reason="glibc's mallopt only (Linux); elsewhere nothing is set")

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
ENTRY = "sys.argv = ['rlexp', '--help']\nfrom rlexp.__main__ import entry\nentry()"


def _faults(setup: str, **env: str) -> list[int]:
    code = PROBE.format(setup=setup)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_cli_entry_makes_a_freed_block_reusable_without_faults() -> None:
    pages = (256 << 20) // 4096
    first, second = _faults(ENTRY)
    assert first >= pages // 2  # the first round faults the block in
    assert second < pages // 50, (first, second)  # the second reuses it


def test_glibc_defaults_fault_the_block_in_every_time() -> None:
    """The control: without the settings (`RLEXP_MALLOC=default`) the block is mmapped afresh each round."""
    pages = (256 << 20) // 4096
    first, second = _faults(ENTRY, RLEXP_MALLOC="default")
    assert first >= pages // 2 and second >= pages // 2, (first, second)
