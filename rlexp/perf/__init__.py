"""rlexp's speed work on Tunix's and XLA:CPU's code paths, applied explicitly once in a run's JAX set-up.

`perf.patches` names the patches a run applies (default: all of `PATCHES`; `perf.patches=[]` runs Tunix's own
code). `apply(names)` installs those and removes the others, so a process's state is a function of its last
call. A patch that replaces a library function is guarded by the fingerprint of that function's source
(`rlexp.compat.patching`): on a mismatch the run fails in one line naming the patch and the `perf.patches`
value that leaves it out. What a run applied is recorded in its summary.json under `perf`.

Each patch has its module, whose docstring says what it changes and what it measured:
`token_rows`, `bf16_gemm`, `rope_table`, `decode_attention`, `trainer` (`optimizer_first`, `one_device_put`),
`lean_sampler` (rlexp.tunix.sampler, a layer above: this names it), `malloc` (applied by the run's set-up only for large buffers on CPU, before XLA starts its threads).
Correctness fixes of Tunix are not here: they are always on (`rlexp.fixes`).

This module imports nothing heavy, so that config validation can check names before JAX is imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

PATCHES: tuple[str, ...] = (
    "token_rows",
    "bf16_gemm",
    "rope_table",
    "decode_attention",
    "optimizer_first",
    "one_device_put",
    "lean_sampler",
    "malloc",
)
# selected here, built where rlexp builds the rollout (rlexp.tunix.sampler): a colocated rollout and `rlexp eval`
# sample with it instead of Tunix's own `Sampler`; its Tunix privates are checked at the run's start
# (rlexp.tunix.privates)
CHOSEN_BY_THE_RUN = ("lean_sampler",)


_applied: list[str] = []  # what the last `apply` installed, and `malloc` when the run's set-up applied it


def off_hint(name: str, names: Iterable[str]) -> str:
    """How to run without patch `name`: the perf.patches value of `names` less it."""
    rest = [n for n in names if n != name]
    return f"run without it: perf.patches=[{','.join(rest)}]"


def apply(names: Iterable[str]) -> list[str]:
    """Install the named patches (except `malloc`, see `rlexp.perf.malloc`) and remove every other; returns the
    names installed. Imports Tunix and JAX."""
    from rlexp.compat import patching
    from rlexp.perf import bf16_gemm, decode_attention, rope_table, token_rows, trainer

    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in PATCHES]
    if unknown:
        raise ValueError(f"unknown perf patches {unknown}; known: {list(PATCHES)}")
    installers: dict[str, Any] = {
        "token_rows": token_rows.install,
        "bf16_gemm": bf16_gemm.install,
        "rope_table": rope_table.install,
        "decode_attention": decode_attention.install,
        "optimizer_first": trainer.install_optimizer_first,
        "one_device_put": trainer.install_one_device_put,
    }
    for name in installers:
        if name in wanted:
            continue
        if name == "rope_table":
            rope_table.uninstall()
        else:
            patching.uninstall(name)
    for name in wanted:
        if name in installers:
            installers[name](off_hint(name, wanted))
    _applied[:] = [n for n in wanted if n in installers or n in CHOSEN_BY_THE_RUN]
    return list(_applied)


def applied_malloc() -> None:
    """Record that the run's set-up applied the `malloc` patch (`rlexp.perf.malloc.reuse_freed_memory`)."""
    if "malloc" not in _applied:
        _applied.append("malloc")


def summary(classes: dict[str, str] | None = None) -> dict[str, Any]:
    """summary.json's `perf`: the patches this process applied, what became of its kernels, and `classes`: the
    qualified class names of the sampler, rollout, learner and cluster that ran (rlexp.tunix.ran_classes)."""
    return {"patches": list(_applied), "kernels": kernel_status(), **({"classes": classes} if classes else {})}


def kernel_status() -> dict[str, str]:
    """What became of the C++ kernels this process tried to build: name -> 'built' or why not."""
    from rlexp.perf import decode_attention

    if not decode_attention.tried():
        return {}
    return {
        "decode_attention": "unavailable: " + decode_attention.unavailable[0]
        if decode_attention.unavailable
        else "built"
    }
