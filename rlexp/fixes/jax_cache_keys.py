"""JAX 0.10.2's persistent compilation cache in a multi-process CPU run: a program's cache key hashes the topology of the
devices it runs on, and XLA:CPU's topology describes only the calling process's own devices, so every process
keys the same program differently. Only process 0 writes cache entries, so the others never found theirs and
compiled every program at every start (a 6-step `slice=cpu-2x1` job on 2 cores: 77 of 77 programs, training
40 s instead of 14 s), while process 0 waited for them in its collectives. `share_cpu_cache_keys` keys every
process's programs with process 0's topology: the keys process 0 writes, which the others then read.

With the keys shared, `share_compiled_programs` goes one step further where every process runs on this machine
and reads the same cache folder: a program that spans the processes is compiled by process 0 alone, which hands
the binary to the others through JAX's coordination service (`jax_share_binary_between_hosts`), instead of each
process compiling the same program beside it: the two-process training test on a cold cache took 93 CPU-s
without it and 72 with it (AMD EPYC, 2 cores).

Applied by the run's JAX set-up (rlexp.train.run) when the compile cache is on; `compile_cache.enabled=false` runs
without it. Guarded by the source fingerprint of the JAX function it replaces (rlexp.compat.patching).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlexp.compat import patching

CPU_CACHE_KEYS = "cpu_cache_keys"  # the patch's name (rlexp.compat.patching)
_TOPOLOGY_KEY = "rlexp/cpu_topology_fingerprint"
_process_0_fingerprint: list[int] = []  # once per JAX runtime: the coordination service keeps a key for its life
_PLACE_KEY = "rlexp/compile_place/{}"
_one_place: list[bool] = []  # once per JAX runtime, as the fingerprint


def share_cpu_cache_keys(timeout_ms: int = 300_000) -> bool:
    """Hash process 0's device topology into every process's compilation cache keys in a multi-process run on CPU
    (see the module docstring); returns whether it did. For a run with the persistent cache on; needs
    `jax.distributed.initialize`, and every process calls it (the others wait for process 0's fingerprint)."""
    import jax
    from jax._src import cache_key, distributed
    from jax._src.lib import xla_client

    if jax.process_count() == 1 or any(d.platform != "cpu" for d in jax.devices()):
        return False
    target = patching.Target(cache_key, "_hash_accelerator_config", "923575fb3c0bf79a", distribution="jax")
    off = "run without it: compile_cache.enabled=false"
    patching.check(CPU_CACHE_KEYS, [target], off, key="compile_cache")  # before the other processes wait
    if not _process_0_fingerprint:
        client = distributed.global_state.client
        if jax.process_index() == 0:
            fingerprint = xla_client.get_topology_for_devices(jax.local_devices()).fingerprint()
            client.key_value_set(_TOPOLOGY_KEY, str(fingerprint))
        else:
            fingerprint = int(client.blocking_key_value_get(_TOPOLOGY_KEY, timeout_ms))
        _process_0_fingerprint.append(fingerprint)
    fingerprint = _process_0_fingerprint[0]

    def layer(jax_hash: Any) -> Any:
        def _hash_accelerator_config(hash_obj: Any, accelerators: Any) -> None:
            if all(d.platform == "cpu" for d in accelerators.flat):
                # what JAX hashes on process 0 (XLA:CPU's topology is the process's, whatever devices are asked)
                hash_obj.update(fingerprint.to_bytes(8, byteorder="big"))
            else:
                jax_hash(hash_obj, accelerators)

        return _hash_accelerator_config

    patching.install(CPU_CACHE_KEYS, [(target, 50, layer)], off, key="compile_cache")
    return True


def share_compiled_programs(cache_dir: Path, timeout_ms: int = 300_000) -> bool:
    """Let process 0 alone compile each program that spans the processes and send its binary to the others, when
    every process of the run is on this host and reads `cache_dir` (the same folder, by device and inode); returns
    whether it did. Call after `share_cpu_cache_keys` returned True, in every process.

    Why only then: a process that misses the persistent cache waits for process 0's binary, and process 0 sends
    one only when it compiles. With a cache folder per host, process 0 could find a program in its own cache that
    another host lacks, and that host would wait for a binary nobody sends. Every process asks the coordination
    service the same question, so all decide alike."""
    import socket

    import jax
    from jax._src import distributed

    if not _one_place:
        client = distributed.global_state.client
        stat = cache_dir.stat()
        client.key_value_set(
            _PLACE_KEY.format(jax.process_index()), f"{socket.gethostname()}:{stat.st_dev}:{stat.st_ino}"
        )
        places = {client.blocking_key_value_get(_PLACE_KEY.format(i), timeout_ms) for i in range(jax.process_count())}
        _one_place.append(len(places) == 1)
    jax.config.update("jax_share_binary_between_hosts", _one_place[0])
    return _one_place[0]
