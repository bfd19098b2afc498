"""Real Slurm: both processes of a 2-task step (`srun -n 2`, as a `slice=cpu-2x1` job runs) hit the JAX compile
cache for what process 0 compiled and cached. Only process 0 writes entries, and XLA:CPU's topology in a cache key is the
calling process's own (rlexp.fixes.jax_cache_keys): without rlexp's fix process 1 missed every
program at every start and compiled it again. On a cold cache process 1 compiles nothing either: it hits what
process 0 wrote or waits for the binary process 0 sends (JAX's own log lines say which)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, rlexp_env

pytestmark = pytest.mark.slow

# One program over both processes' devices, compiled through the set-up a training job runs (rlexp.train.run),
# then again from the persistent cache alone: a process starting afresh (its in-memory caches cleared). Process 0
# writes the entry before it joins the program's collective, so it is there when process 1's result is.
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

import logging

events = []
jax.monitoring.register_event_listener(lambda event, **_: events.append(event))
said = []  # JAX's compiler log: "Waiting for module ..." (sent by process 0), "Not writing ... process_id != 0" (compiled)


class Said(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())


logging.getLogger("jax._src.compiler").addHandler(Said())
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
sharding = NamedSharding(jax.make_mesh((2,), ("x",)), PartitionSpec("x"))
x = jax.make_array_from_process_local_data(sharding, np.full((1, 8), jax.process_index(), np.float32))
for start in ("cold", "warm"):
    events.clear()
    said.clear()
    total = float(jax.jit(lambda a: (a * 3.0).sum())(x))
    hits, looked = (events.count(f"/jax/compilation_cache/{e}") for e in ("cache_hits", "compile_requests_use_cache"))
    waited = sum(m.startswith("Waiting for module") for m in said)
    compiled = sum(m.startswith("Not writing persistent cache entry since process_id") for m in said)
    print(f"{start} process {jax.process_index()}: {hits} hits of {looked}, sum {total}")
    print(f"{start} process {jax.process_index()}: waited {waited} compiled {compiled}")
    jax.clear_caches()
"""


def test_every_process_hits_what_process_0_cached(local_slurm: str, tmp_path: Path) -> None:
    cmd = ["srun", "-n", "2", "--kill-on-bad-exit=1", sys.executable, "-c", STEP, str(tmp_path / "cache")]
    done = subprocess.run(cmd, cwd=REPO, env=rlexp_env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    found = re.findall(r"^(cold|warm) process (\d): (\d+) hits of (\d+), sum 24.0$", done.stdout, re.M)
    seen = {(start, int(p)): (int(hits), int(looked)) for start, p, hits, looked in found}
    assert len(seen) == 4, done.stdout + done.stderr[-3000:]
    programs = seen["cold", 0][1]
    assert seen["cold", 0] == (0, programs) and programs >= 1, seen  # an empty cache: process 0 compiles, writes
    assert seen["warm", 0] == seen["warm", 1] == (programs, programs), seen  # all from the cache, in both
    cold_1 = re.search(r"^cold process 1: waited (\d+) compiled (\d+)$", done.stdout, re.M)
    assert cold_1, done.stdout + done.stderr[-3000:]
    waited, compiled = int(cold_1[1]), int(cold_1[2])
    # process 1 read what process 0 wrote or received what it compiled: it never compiled a program itself
    assert compiled == 0 and waited + seen["cold", 1][0] == programs, (waited, compiled, seen)
