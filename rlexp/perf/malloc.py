"""Patch `malloc`: glibc's malloc told to keep and reuse freed memory, for XLA:CPU's per-execution buffers.

XLA:CPU allocates each program's temporary buffer with `malloc` on every execution and frees it after: on the
compute workload of benchmarks/README.md the train step's is 738 MB. glibc serves a block that large with a
fresh `mmap` and returns it with `munmap`, so every execution page-faults the whole block back in and the kernel
zeroes it (`clear_page_erms` was 10 % of the process's CPU under perf; 3.1-4.0 million minor faults in a
16-step run, 10-12 s of system time). XLA's worker threads allocate from per-thread arenas, which fall back to
`mmap` for any block above 64 MB whatever the mmap settings say. So, before any thread exists:

- one arena (`M_ARENA_MAX=1`): every thread allocates from the main heap;
- no `mmap` for large blocks (`M_MMAP_MAX=0`) and no trimming below 2 GiB of free top (`M_TRIM_THRESHOLD`):
  a freed block stays in the heap and the next execution reuses it, already faulted in.

Same peak RSS (the buffers are live at the peak either way); 0.6 million faults and 4-5 s of system time in
the same run. For small models it costs: the embedded default's buffers are a few MB, which glibc reuses anyway,
and with one arena its cold run took 27-30 s instead of 25 s (steps 38-41 vs 30-33 ms; threads contend for the
one heap). So a training process on a CPU slice sets this (`rlexp.train.run.setup_jax`) only when its estimated
activations (`rlexp.estimates.memory`) reach `LARGE_BUFFER`, the size above which a thread's arena maps each block
afresh; on glibc only (elsewhere nothing changes). Leaving `malloc` out of `perf.patches` keeps glibc's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int
LARGE_BUFFER = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena's heap never serves a larger block


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def reuse_freed_memory() -> bool:
    """Apply the settings above; True when glibc took all three. Call before any thread is started."""
    libc = _glibc()
    if libc is None:
        return False
    settings = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return all(libc.mallopt(param, value) == 1 for param, value in settings)
