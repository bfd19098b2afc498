"""Correctness fixes of pinned libraries: where a library's own behaviour gives wrong results for rlexp's models.

Each module names the upstream behaviour it fixes and the library functions it replaces, guarded by their
source fingerprints (`rlexp.compat.patching`). Fixes are always on: `apply()` installs them where rlexp builds a
model (`rlexp.models.tunix_text`, `rlexp.models.gemma4`), never as a side effect of an import. One fix of JAX,
`jax_cache_keys` (a multi-process CPU run shares its compile cache entries and, on one host, process 0's compiled
binaries), is installed by the run's JAX set-up when the compile cache is on. Speed work lives in `rlexp.perf`,
switched by `perf.patches`.
"""

from __future__ import annotations

FIXES = ("tunix_rope", "tunix_remat", "tunix_lora_dtype", "tunix_ppo_rewards", "tunix_gemma4_moe")


def apply() -> None:
    """Install every fix (idempotent)."""
    from rlexp.fixes import tunix_gemma4_moe, tunix_lora_dtype, tunix_ppo_rewards, tunix_remat, tunix_rope

    tunix_rope.install()
    tunix_remat.install()
    tunix_lora_dtype.install()
    tunix_ppo_rewards.install()
    tunix_gemma4_moe.install()
