"""Multi-process CPU runs (gloo): never two programs' collectives in flight at once.

XLA's CPU client starts a multi-device program as soon as its inputs are ready, on its own threads, whatever
the process dispatched before is still running (`jax_cpu_enable_async_dispatch` covers single-device programs
only). Two programs with collectives in flight at once then meet the other process's collectives in whichever
order each process runs them, and gloo aborts both processes ("Received data size doesn't match expected size
... collective mismatch").

Tunix's rollout thread hands a step's batch to the trainer while the reference log-probs it dispatched (fsdp
all-gathers) may still run, and rlexp's step hook then starts work of its own that depends on none of them: the
mid-run eval, and a stop's checkpoint (orbax's barriers are `multihost_utils.sync_global_devices`, a
collective). Measured in 2-process `slice=cpu-2x1` runs: with an eval and a checkpoint every step, 6 of 6 runs
aborted at the first mid-run eval; with the defaults of the test suite (every 4 steps), 4 of 26. Waiting for
everything dispatched before the eval: 0 of 20 and 0 of 12. TPU and GPU devices run a process's programs in
the order they were enqueued; there, and in one process, `settle` does nothing.
"""

from __future__ import annotations

import functools


@functools.cache
def must_order() -> bool:
    """Whether this process shares CPU collectives (gloo) with other JAX processes."""
    import jax

    return jax.process_count() > 1 and jax.default_backend() == "cpu"


def settle() -> None:
    """Block until every computation this process has dispatched has finished (multi-process CPU only)."""
    if must_order():
        import jax

        jax.block_until_ready(jax.live_arrays())
