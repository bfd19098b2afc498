"""The garbage collector during a training session: long-lived objects are frozen out of its reach.

A training process builds a large heap that lives to the end: jax, Tunix and their modules, the config, the
models, traced programs. CPython's cyclic collector walks all of it at each full (generation 2) collection;
in the default run that was 9 full collections of 0.04-0.39 s while Tunix imported and set up (1.6 s in all),
plus two full `gc.collect()` calls Tunix makes itself (RLCluster set-up, the learner's HBM report: 0.5 s). The
session therefore pauses automatic collection while it sets up, freezes (`gc.freeze`) what set-up built, and
collects normally again for the training loop, where a full collection now walks only what training made.
Reference counting still frees every acyclic object at once; only cyclic garbage made during set-up waits
for `release`, which puts the frozen objects back under the collector when the session ends (a sweep's
in-process jobs and the test suite run many sessions in one process).
"""

from __future__ import annotations

import gc


def pause() -> bool:
    """Stop automatic collection and freeze everything alive now; returns whether the collector was enabled."""
    enabled = gc.isenabled()
    gc.disable()
    gc.freeze()
    return enabled


def settle() -> None:
    """Freeze what the last phase built, so explicit full collections after it skip those objects."""
    gc.freeze()


def resume(enabled: bool) -> None:
    """End of set-up: freeze what it built and collect automatically again (if the collector was on)."""
    gc.freeze()
    if enabled:
        gc.enable()


def release(enabled: bool) -> None:
    """End of the session: every frozen object is the collector's again; the collector as it was before."""
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()
