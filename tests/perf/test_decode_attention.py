"""rlexp.perf.decode_attention: a Qwen3 decoding step on CPU attends through the C++ kernel and gives Tunix's
values (bf16: the same bits; f32: within summation order), and Tunix's attention runs when no compiler is there."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tunix.models.qwen3 import model as qwen3_lib

from rlexp import perf
from rlexp.families.load import load_model
from rlexp.perf import decode_attention
from tests.helpers import compose_conf

PROMPT, SLOTS = 5, 12


def _masks(batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prefill and one-step masks for left-padded prompts (row 1 padded by 2), as Tunix's sampler builds them;
    row 2 of the step attends nowhere (Tunix: a uniform softmax over every slot)."""
    valid = np.ones((batch, PROMPT), bool)
    valid[1, :2] = False
    positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0)
    slots = np.zeros((batch, SLOTS), bool)
    slots[:, :PROMPT] = valid
    causal = np.arange(SLOTS)[None, :] <= np.arange(PROMPT)[:, None]
    prefill = causal[None] & slots[:, None, :]
    step = slots.copy()
    step[:, PROMPT] = True
    step[2] = False
    return positions, prefill, step[:, None, :]


def _decode_step(model: nnx.Module, dtype) -> tuple[jax.Array, dict, str]:
    """Prefill, then one decoding step; its logits, the cache after it, and the step's lowered text."""
    batch = 3
    tokens = jnp.asarray(np.random.default_rng(0).integers(3, model.config.vocab_size, size=(batch, PROMPT + 1)))
    positions, prefill, step = _masks(batch)
    cache = model.init_cache(batch, SLOTS, dtype)
    _, cache = model(tokens[:, :PROMPT], jnp.asarray(positions), cache, jnp.asarray(prefill))
    graph, state = nnx.split(model)

    def one_step(state, cache):
        return nnx.merge(graph, state)(tokens[:, PROMPT:], jnp.asarray(positions[:, -1:] + 1), cache, step)

    jitted = jax.jit(one_step)
    logits, cache = jitted(state, cache)
    return logits, cache, jitted.lower(state, cache).as_text()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_decoding_step_takes_the_kernel_and_gives_tunix_values(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = compose_conf([f"model.dtype={dtype}", "model.param_dtype=float32"])
    model = load_model(conf.model, None)
    ours, our_cache, text = _decode_step(model, jnp.dtype(dtype))
    assert f"rlexp_decode_attention_{'f32' if dtype == 'float32' else 'bf16'}" in text
    monkeypatch.setattr(qwen3_lib.Attention, "block", inspect.unwrap(qwen3_lib.Attention.block))
    theirs, their_cache, text = _decode_step(model, jnp.dtype(dtype))
    assert "rlexp_decode_attention" not in text
    # bf16: the same bits; f32: a later layer's row differs by the earlier layers' summation order
    same = np.testing.assert_array_equal if dtype == "bfloat16" else _close
    for layer in their_cache:
        for kv in ("k", "v"):  # the step's row written where Tunix writes it
            same(np.asarray(our_cache[layer][kv], np.float32), np.asarray(their_cache[layer][kv], np.float32))
        np.testing.assert_array_equal(our_cache[layer]["end_index"], their_cache[layer]["end_index"])
    same(np.asarray(ours, np.float32), np.asarray(theirs, np.float32))


def _close(ours: np.ndarray, theirs: np.ndarray) -> None:
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=2e-6)


def test_prefill_and_training_keep_tunix_attention() -> None:
    model = load_model(compose_conf([]).model, None)
    tokens = jnp.ones((2, 4), jnp.int32)
    positions = jnp.tile(jnp.arange(4)[None], (2, 1))
    mask = jnp.tile(jnp.tril(jnp.ones((4, 4), bool))[None], (2, 1, 1))
    graph, state = nnx.split(model)

    def loss(state):
        logits, _ = nnx.merge(graph, state)(tokens, positions, None, mask)
        return jnp.mean(logits)

    assert "rlexp_decode_attention" not in jax.jit(jax.grad(loss)).lower(state).as_text()


@pytest.mark.slow
def test_without_a_compiler_tunix_attention_runs_and_says_why_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    decode_attention._registered.cache_clear()
    decode_attention.unavailable.clear()
    try:
        model = load_model(compose_conf([]).model, None)
        records: list[logging.LogRecord] = []
        collect = logging.Handler()
        collect.emit = records.append  # type: ignore[method-assign]
        logger = logging.getLogger(decode_attention.__name__)
        logger.addHandler(collect)
        try:
            for _ in range(2):
                _, _, text = _decode_step(model, jnp.dtype("float32"))
                assert "rlexp_decode_attention" not in text
        finally:
            logger.removeHandler(collect)
        warned = [r for r in records if r.name == decode_attention.__name__]
        assert len(warned) == 1 and warned[0].levelno == logging.WARNING
        assert "no-such-compiler" in warned[0].getMessage()  # the reason: the compiler that is missing
        assert perf.kernel_status()["decode_attention"].startswith("unavailable: ")
        assert not list((tmp_path / "cache").rglob("*.so*"))  # no partial library left for a later run to load
    finally:
        decode_attention._registered.cache_clear()
        decode_attention.unavailable.clear()


@pytest.mark.slow
def test_left_out_of_perf_patches_tunix_attention_runs() -> None:
    perf.apply([p for p in perf.PATCHES if p != "decode_attention"])
    try:
        assert not hasattr(qwen3_lib.Attention.block, "rlexp_patch")  # Tunix's own block, the same object
        _, _, text = _decode_step(load_model(compose_conf([]).model, None), jnp.dtype("float32"))
        assert "rlexp_decode_attention" not in text
    finally:
        perf.apply(perf.PATCHES)


@pytest.mark.slow
def test_the_user_command_decodes_through_the_kernel(user_command_programs: dict[str, str]) -> None:
    """`python -m rlexp` as typed: its rollouts' compiled decode loop calls the kernel (XLA's dump of it)."""
    decode = [text for name, text in user_command_programs.items() if "decode_fn" in name]
    assert decode and all("rlexp_decode_attention_f32" in text for text in decode)
