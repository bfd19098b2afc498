"""rlexp.perf.token_rows and bf16_gemm: the token-rows projections on CPU give Tunix's values and gradients, in 2-D dots;
with a bf16 compute dtype every projection dot takes bf16 operands to an f32 result (the CPU's bf16 GEMM)."""

from __future__ import annotations

import inspect

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType, Mesh
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.families.load import load_model
from rlexp.perf import platform as perf_platform
from rlexp.perf.bf16_gemm import matmul_f32_accumulate
from rlexp.perf.token_rows import token_rows_spec
from tests.helpers import compose_conf


@pytest.mark.parametrize(
    ("spec", "rows"),
    [
        ("BTD,DNH->BTNH", (2, "ZD,DNH->ZNH")),
        ("BSD,DKH->BSKH", (2, "ZD,DKH->ZKH")),
        ("BTNH,NHD->BTD", (2, "ZNH,NHD->ZD")),
        ("BTD,DV->BTV", (2, "ZD,DV->ZV")),
        ("ZTD,DV->ZTV", (2, "YD,DV->YV")),  # the merged dim's letter is one the spec does not use
        ("TD,DV->TV", None),  # one leading dim: nothing to merge
        ("BTD,BDV->BTV", None),  # B is the weight's too
    ],
)
def test_token_rows_spec(spec: str, rows: tuple[int, str] | None) -> None:
    assert token_rows_spec(spec) == rows


def _inputs(tokens):
    b, n = tokens.shape
    positions = jnp.tile(jnp.arange(n)[None], (b, 1))
    mask = jnp.tile(jnp.tril(jnp.ones((n, n), dtype=bool))[None], (b, 1, 1))
    return tokens, positions, None, mask


def _loss(model, tokens):
    logits, _ = model(*_inputs(tokens))
    return jnp.mean(jax.nn.log_softmax(logits)[..., 3] * jnp.arange(tokens.shape[1]))


def _value_and_grad(model, tokens):  # type: ignore[no-untyped-def]
    """The loss and its gradients in one compiled call (op by op, each of the model's ops compiled on its own
    cost seconds); a fresh jit per call, so a call after a monkeypatch traces the patched code."""
    return nnx.jit(nnx.value_and_grad(_loss))(model, tokens)


def _dot_generals(jaxpr):  # type: ignore[no-untyped-def]
    """Every dot_general equation of a jaxpr, inner jaxprs included (jnp.einsum and jnp.dot are jitted)."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _dot_generals(sub)


def _loss_jaxpr(model, tokens, grad: bool):  # type: ignore[no-untyped-def]
    graph, state = nnx.split(model)
    loss = lambda s: _loss(nnx.merge(graph, s), tokens)  # noqa: E731
    return jax.make_jaxpr(jax.grad(loss) if grad else loss)(state).jaxpr


def _dots_on_3d_activations(model, tokens) -> int:
    """dot_generals in the forward and backward with an operand that keeps batch and time apart."""
    batch_time = tuple(tokens.shape)
    return sum(
        any(v.aval.ndim == 3 and v.aval.shape[:2] == batch_time for v in eqn.invars)
        for eqn in _dot_generals(_loss_jaxpr(model, tokens, grad=True))
    )


def _projections_contracting_two_dims(model, tokens) -> int:
    """dot_generals of the forward without batch dims that contract two dims: the attention output's projection
    (ZNH,NHD->ZD), which XLA:CPU lowered in float32 with a head-major copy of its weight in every call."""
    count = 0
    for eqn in _dot_generals(_loss_jaxpr(model, tokens, grad=False)):
        (contracting, _), (batch, _) = eqn.params["dimension_numbers"]
        count += not batch and len(contracting) > 1
    return count


@pytest.mark.slow
def test_projections_on_token_rows_match_tunix(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = compose_conf()
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    model = load_model(conf.model, mesh)  # the builtin tiny Qwen3 (the perf patches: tests/perf/conftest.py)
    tokens = jnp.asarray(np.random.default_rng(0).integers(3, conf.model.vocab_size, size=(4, 9)), jnp.int32)

    patched_loss, patched_grads = _value_and_grad(model, tokens)
    patched_3d = _dots_on_3d_activations(model, tokens)
    patched_two = _projections_contracting_two_dims(model, tokens)
    monkeypatch.setattr(qwen3_lib.Einsum, "__call__", inspect.unwrap(qwen3_lib.Einsum.__call__))
    monkeypatch.setattr(qwen3_lib.MLP, "block", inspect.unwrap(qwen3_lib.MLP.block))
    monkeypatch.setattr(qwen3_lib.Embedder, "decode", inspect.unwrap(qwen3_lib.Embedder.decode))
    tunix_loss, tunix_grads = _value_and_grad(model, tokens)
    tunix_3d = _dots_on_3d_activations(model, tokens)
    tunix_two = _projections_contracting_two_dims(model, tokens)

    assert tunix_3d > 0 and patched_3d == 0, (tunix_3d, patched_3d)
    assert tunix_two == conf.model.num_layers and patched_two == 0, (tunix_two, patched_two)  # one 2-D matmul
    np.testing.assert_allclose(patched_loss, tunix_loss, rtol=1e-6)
    flat_patched = jax.tree.leaves(nnx.state(patched_grads))
    flat_tunix = jax.tree.leaves(nnx.state(tunix_grads))
    assert len(flat_patched) == len(flat_tunix) > 10
    for ours, theirs in zip(flat_patched, flat_tunix, strict=True):
        # atol: the attention output's float32 projection runs as one 2-D matmul, a summation order of its own
        # (up to 2.2e-7 apart on gradients of ~5e-3)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=5e-7)


def _dot_kinds(fn, *args) -> dict[tuple[str, str], int]:
    """(operand dtype, result dtype) -> number of dot_generals in fn's jaxpr, inner jaxprs included."""
    kinds: dict[tuple[str, str], int] = {}
    for eqn in _dot_generals(jax.make_jaxpr(fn)(*args).jaxpr):
        key = ("/".join(sorted({str(v.aval.dtype) for v in eqn.invars})), str(eqn.outvars[0].aval.dtype))
        kinds[key] = kinds.get(key, 0) + 1
    return kinds


@pytest.mark.parametrize("w_transposed", [False, True])
def test_matmul_f32_accumulate_values_gradients_and_dots(w_transposed: bool) -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(6, 5)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(7, 5) if w_transposed else (5, 7)), jnp.bfloat16)
    probe = jnp.asarray(rng.normal(size=(6, 7)), jnp.float32)

    def ours(x, w):
        return jnp.sum(matmul_f32_accumulate(x, w, w_transposed).astype(jnp.float32) * probe)

    def reference(x, w):  # the same products in float32, as XLA computed Tunix's bf16 dots
        w32 = w.astype(jnp.float32)
        out = x.astype(jnp.float32) @ (w32.T if w_transposed else w32)
        return jnp.sum(out.astype(jnp.bfloat16).astype(jnp.float32) * probe)

    value, grads = jax.value_and_grad(ours, argnums=(0, 1))(x, w)
    ref_value, ref_grads = jax.value_and_grad(reference, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    for ours_g, ref_g in zip(grads, ref_grads, strict=True):
        assert ours_g.dtype == jnp.bfloat16 and ours_g.shape == ref_g.shape
        np.testing.assert_allclose(ours_g.astype(jnp.float32), ref_g.astype(jnp.float32), rtol=1e-2, atol=1e-2)
    # forward and both backward dots: bf16 operands, f32 result
    assert _dot_kinds(jax.grad(ours, argnums=(0, 1)), x, w) == {("bfloat16", "float32"): 3}


@pytest.mark.slow
def test_bfloat16_projections_take_the_bf16_gemm_and_match_tunix(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = compose_conf(["model.dtype=bfloat16"])  # float32 weights, bf16 compute
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    model = load_model(conf.model, mesh)
    tokens = jnp.asarray(np.random.default_rng(0).integers(3, conf.model.vocab_size, size=(4, 9)), jnp.int32)

    def kinds_in_grad() -> dict[tuple[str, str], int]:  # a fresh function per call: traced anew
        graph, state = nnx.split(model)
        return _dot_kinds(lambda s: jax.grad(lambda s: _loss(nnx.merge(graph, s), tokens))(s), state)

    patched_loss, patched_grads = _value_and_grad(model, tokens)
    patched_kinds = kinds_in_grad()
    monkeypatch.setattr(qwen3_lib.Einsum, "__call__", inspect.unwrap(qwen3_lib.Einsum.__call__))
    monkeypatch.setattr(qwen3_lib.MLP, "block", inspect.unwrap(qwen3_lib.MLP.block))
    monkeypatch.setattr(qwen3_lib.Embedder, "decode", inspect.unwrap(qwen3_lib.Embedder.decode))
    for layer in model.layers:
        for linear in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
            monkeypatch.setattr(linear, "dot_general", jax.lax.dot_general)
    tunix_loss, tunix_grads = _value_and_grad(model, tokens)
    tunix_kinds = kinds_in_grad()

    narrow, mixed = ("bfloat16", "bfloat16"), ("bfloat16", "float32")
    # Tunix: every dot bf16 -> bf16 (XLA:CPU upcasts them); patched: only attention's two einsums per layer
    # (forward and two backward each) stay so, the projections' dots all turn bf16 -> f32
    assert mixed not in tunix_kinds and tunix_kinds[narrow] > 0
    attention = 2 * 3 * conf.model.num_layers
    assert patched_kinds == {narrow: attention, mixed: tunix_kinds[narrow] - attention}, (patched_kinds, tunix_kinds)
    np.testing.assert_allclose(patched_loss, tunix_loss, rtol=1e-3)
    flat_patched = jax.tree.leaves(nnx.state(patched_grads))
    flat_tunix = jax.tree.leaves(nnx.state(tunix_grads))
    assert len(flat_patched) == len(flat_tunix) > 10
    for ours, theirs in zip(flat_patched, flat_tunix, strict=True):
        scale = float(jnp.max(jnp.abs(theirs.astype(jnp.float32)))) or 1.0
        np.testing.assert_allclose(ours.astype(jnp.float32) / scale, theirs.astype(jnp.float32) / scale, atol=2e-2)


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["cpu", "other"])
def test_lora_on_bf16_projections_keeps_the_kv_cache_dtype(platform: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """qwix's float32 adapter product promoted the bf16 k and v projections, and the sampler's bf16 KV cache
    refused them in `dynamic_update_slice`: every bf16 model with LoRA failed at its first rollout."""
    from rlexp.models.lora import apply_lora

    if platform == "other":  # Tunix's own projections, as on TPU and GPU
        monkeypatch.setattr(perf_platform, "on_cpu", lambda: False)
    conf = compose_conf(["model.dtype=bfloat16", "trainer.lora.rank=4"])
    model = apply_lora(load_model(conf.model, None), conf.trainer.lora, None)
    b, n, size = 2, 5, 16
    tokens = jnp.asarray(np.random.default_rng(0).integers(3, conf.model.vocab_size, size=(b, n)), jnp.int32)
    positions = jnp.tile(jnp.arange(n)[None], (b, 1))
    mask = jnp.tile((jnp.arange(size)[None, :] <= jnp.arange(n)[:, None])[None], (b, 1, 1))
    cache = model.init_cache(b, size, jnp.bfloat16)
    logits, cache = nnx.jit(lambda m, *args: m(*args))(model, tokens, positions, cache, mask)  # one compile
    assert {cache[layer][kv].dtype for layer in cache for kv in ("k", "v")} == {jnp.dtype(jnp.bfloat16)}
    assert jnp.isfinite(logits.astype(jnp.float32)).all()
