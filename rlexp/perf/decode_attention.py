"""Patch `decode_attention`: on one CPU device, Qwen3's one-token decoding steps attend through a C++ XLA custom
call (`decode_attention.cc`), built on first use with the system's C++ compiler.

During a rollout, every decoding step attends one new token per row over each layer's KV cache. XLA:CPU lowers
Tunix's form of this (two einsums around a masked softmax) by copying each layer's K and V cache head-major,
every step, then multiplying over every cache slot, attended or not. On the ~20 M-parameter compute workload
(`benchmarks/bench_vs_trl.py`), that is ~2.5 ms of a 9 ms f32 decoding step on a Zen 5 machine, and ~10 ms of a
25 ms bf16 one on Zen 4 (benchmarks/README.md). The kernel reads the cache once, in place, and only at the
positions the mask lets a row attend to: on average half the slots, since a rollout fills the cache as it goes.

It has the same arithmetic as Tunix's form: float32 accumulation, rounded to bf16 where Tunix's bf16 einsums
round. Only the summation order differs, by ~1e-7 relative in float32. It is used on a single CPU device, for
float32 or bfloat16 caches. Everywhere else, Tunix's block runs: on a sharded mesh, in prefill and training, or
when the kernel cannot be built (no C++ compiler: `CXX`, else `c++`), which is said once at WARNING with the
reason. The patched block mirrors Tunix 0.1.7's up to its attention (projections, norms, RoPE, the cache row
written at `end_index`), so it is guarded by the fingerprint of that block.

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
from jax import lax
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.compat import patching
from rlexp.compat.patching import PERF_KEY

log = logging.getLogger(__name__)

NAME = "decode_attention"
BLOCK = patching.Target(qwen3_lib.Attention, "block", "53570c21f54f1f15")

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
    """Build (once per machine) and register the kernel; False, with the reason logged once, when it cannot be."""
    try:
        path = library_path()
        if not path.exists():
            build(path)
        lib = ctypes.cdll.LoadLibrary(str(path))
        for target, symbol in _KERNELS.values():
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    except (OSError, subprocess.SubprocessError, AttributeError) as err:
        detail = getattr(err, "stderr", "") or err
        unavailable.append(str(detail).strip()[-500:])
        log.warning("decode attention kernel unavailable, Tunix's attention runs instead: %s", unavailable[0])
        return False
    return True


unavailable: list[str] = []  # why the kernel could not be built in this process, once it was tried


def tried() -> bool:
    """Whether this process tried to build and register the kernel."""
    return _registered.cache_info().currsize > 0


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


def _decode_attention_block(tunix_block):
    """Qwen3's attention block, whose one-token decoding steps on one CPU device attend through the kernel."""

    def block(self, x, segment_pos, cache, attn_mask, segment_ids=None):
        decoding = cache is not None and x.shape[1] == 1 and attn_mask is not None and attn_mask.ndim == 3
        if not decoding or not applies(cache["k"].dtype):
            return tunix_block(self, x, segment_pos, cache, attn_mask, segment_ids)
        query = qwen3_lib.apply_rope(self.q_norm(self.q_proj(x)), segment_pos, head_dim=self.head_dim)
        key = qwen3_lib.apply_rope(self.k_norm(self.k_proj(x)), segment_pos, head_dim=self.head_dim)
        value = self.v_proj(x)
        if not query.dtype == key.dtype == value.dtype == cache["k"].dtype:  # e.g. an adapter's promotion
            return tunix_block(self, x, segment_pos, cache, attn_mask, segment_ids)
        slot = (0, cache["end_index"][0] % cache["v"].shape[1], 0, 0)
        key = lax.dynamic_update_slice(cache["k"], key, slot)
        value = lax.dynamic_update_slice(cache["v"], value, slot)
        b, _, heads, dim = query.shape
        kv_heads = key.shape[2]
        grouped = query.reshape(b, kv_heads, heads // kv_heads, dim)
        out = decode_attention(grouped, key, value, attn_mask[:, 0, :], self.scale)
        new_cache = {"v": value, "k": key, "end_index": cache["end_index"] + 1}
        return new_cache, self.o_proj(out.reshape(b, 1, heads, dim))

    return block


def install(off: str) -> None:
    patching.install(NAME, [(BLOCK, 10, _decode_attention_block)], off, PERF_KEY)
