"""Real Slurm: both processes of a 2-task step (`srun -n 2`, as a `slice=cpu-2x1` job runs) hit the JAX compile
cache that an earlier step filled. Only process 0 writes entries, and XLA:CPU's topology in a cache key is the
calling process's own (rlexp.compat.jax.share_cpu_cache_keys): without rlexp's fix process 1 missed every
program at every start and compiled it again."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, rlexp_env

pytestmark = pytest.mark.slow

# One program over both processes' devices, compiled through the set-up a training job runs (rlexp.train.run).
STEP = """
import sys

import numpy as np

from rlexp.train import distributed
from rlexp.train.run import setup_jax
from tests.helpers import compose_conf

distributed.initialize()
setup_jax(compose_conf(["slice=cpu-2x1", f"compile_cache.dir={sys.argv[1]}"]))
import jax
from jax.sharding import NamedSharding, PartitionSpec

hits = []
jax.monitoring.register_event_listener(lambda event, **_: hits.append(event))
sharding = NamedSharding(jax.make_mesh((2,), ("x",)), PartitionSpec("x"))
x = jax.make_array_from_process_local_data(sharding, np.full((1, 8), jax.process_index(), np.float32))
total = jax.jit(lambda a: (a * 3.0).sum())(x)
looked = hits.count("/jax/compilation_cache/compile_requests_use_cache")
print(f"process {jax.process_index()}: {hits.count('/jax/compilation_cache/cache_hits')} hits of {looked}, sum {float(total)}")
"""


def step(cache: Path) -> dict[int, tuple[int, int]]:
    """{process: (cache hits, cache look-ups)} of one 2-task step."""
    cmd = ["srun", "-n", "2", "--kill-on-bad-exit=1", sys.executable, "-c", STEP, str(cache)]
    done = subprocess.run(cmd, cwd=REPO, env=rlexp_env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    found = re.findall(r"^process (\d): (\d+) hits of (\d+), sum 24.0$", done.stdout, re.M)
    assert len(found) == 2, done.stdout + done.stderr[-3000:]
    return {int(p): (int(hits), int(looked)) for p, hits, looked in found}


def test_every_process_hits_what_process_0_cached(local_slurm: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = step(cache)
    assert first[0][0] == 0 and first[0][1] >= 1, first  # an empty cache: process 0 compiles and writes
    assert list(cache.glob("jit_*")), "nothing cached"
    again = step(cache)
    programs = first[0][1]
    assert again == {0: (programs, programs), 1: (programs, programs)}, again  # all from the cache, in both
