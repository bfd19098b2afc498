"""Decode attention on CPU as one XLA custom call (`decode_attention.cc`), built on first use with the system's
C++ compiler.

During a rollout, every decoding step attends one new token per row over each layer's KV cache. XLA:CPU lowers
Tunix's form of this (two einsums around a masked softmax) by copying each layer's K and V cache head-major,
every step, then multiplying over every cache slot, attended or not. On the ~20 M-parameter compute workload
(`benchmarks/bench_vs_trl.py`), that is ~2.5 ms of a 9 ms f32 decoding step on a Zen 5 machine, and ~10 ms of a
25 ms bf16 one on Zen 4 (benchmarks/README.md). The kernel reads the cache once, in place, and only at the
positions the mask lets a row attend to: on average half the slots, since a rollout fills the cache as it goes.

It has the same arithmetic as Tunix's form: float32 accumulation, rounded to bf16 where Tunix's bf16 einsums
round. Only the summation order differs, by ~1e-7 relative in float32. It is used on a single CPU device, for
float32 or bfloat16 caches. Everywhere else, Tunix's form runs: without a C++ compiler (`CXX`, else `c++`),
on a sharded mesh, under autodiff, or with `RLEXP_DECODE_ATTENTION=off`.

The shared library is cached under `$XDG_CACHE_HOME/rlexp/kernels` (default `~/.cache`). Its name is keyed by
the source, jaxlib's FFI headers and this CPU's flags, because it is built with `-march=native`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("decode_attention.cc")
# cache dtype -> (XLA custom-call target, the handler's symbol in the library)
_KERNELS = {
    jnp.dtype(jnp.float32): ("rlexp_decode_attention_f32", "RlexpDecodeAttentionF32"),
    jnp.dtype(jnp.bfloat16): ("rlexp_decode_attention_bf16", "RlexpDecodeAttentionBF16"),
}


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return os.uname().machine


def library_path() -> Path:
    """Where the kernel's shared library for this source, these headers and this CPU lives."""
    include = Path(jax.ffi.include_dir())
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), (include / "xla/ffi/api/ffi.h").read_bytes(), _cpu_flags().encode()):
        key.update(part)
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlexp" / "kernels"
    return root / f"decode_attention-{key.hexdigest()[:16]}.so"


def build(target: Path) -> None:
    """Compile the kernel to `target`, atomically: a concurrent or interrupted build never leaves a partial file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    cxx = os.environ.get("CXX") or "c++"
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
    os.close(fd)
    cmd = [cxx, "-std=c++17", "-O3", "-march=native", "-fPIC", "-shared", "-I", jax.ffi.include_dir(), str(SOURCE)]
    try:
        subprocess.run([*cmd, "-o", tmp], check=True, capture_output=True, text=True, timeout=300)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@functools.cache
def _registered() -> bool:
    """Build (once per machine) and register the kernel; False, with the reason logged, when it cannot be."""
    if os.environ.get("RLEXP_DECODE_ATTENTION", "on").lower() in ("off", "0", "false"):
        return False
    try:
        path = library_path()
        if not path.exists():
            build(path)
        lib = ctypes.cdll.LoadLibrary(str(path))
        for target, symbol in _KERNELS.values():
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    except (OSError, subprocess.SubprocessError, AttributeError) as err:
        detail = getattr(err, "stderr", "") or err
        log.info("decode attention kernel unavailable, Tunix's attention runs instead: %s", str(detail)[-500:])
        return False
    return True


def applies(cache_dtype) -> bool:
    """Whether the kernel can take a decoding step over a cache of this dtype: one CPU device, a float32 or
    bfloat16 cache, kernel built. Checked before the step's projections, so that a step it refuses traces
    exactly Tunix's block (in a multi-process run, the processes' collectives must stay the same)."""
    if jax.device_count() != 1 or jax.devices()[0].platform != "cpu":
        return False
    return jnp.dtype(cache_dtype) in _KERNELS and _registered()


def decode_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float) -> jax.Array:
    """Attention of q [B, KV, G, D] over the cache k, v [B, S, KV, D] where mask [B, S] is set: [B, KV, G, D].

    For inputs `applies` accepts; it builds and registers the kernel on first use."""
    if not _registered():
        raise RuntimeError("the decode attention kernel is not available here; check `applies` first")
    call = jax.ffi.ffi_call(_KERNELS[q.dtype][0], jax.ShapeDtypeStruct(q.shape, q.dtype))
    return call(q, k, v, mask.astype(jnp.bool_), scale=np.float32(scale))
