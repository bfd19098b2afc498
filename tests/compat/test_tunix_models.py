"""rlexp.compat.tunix_models: the token-rows projections on CPU give Tunix's values and gradients, in 2-D dots."""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType, Mesh
from tunix.models.qwen3 import model as qwen3_lib

from rlexp.compat.tunix_models import token_rows_spec
from rlexp.models.loader import load_model
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


def _dots_on_3d_activations(model, tokens) -> int:
    """dot_generals in the forward and backward, inner jaxprs included (jnp.einsum and jnp.dot are jitted),
    with an operand that keeps batch and time apart."""
    graph, state = nnx.split(model)
    batch_time = tuple(tokens.shape)

    def count(jaxpr) -> int:
        n = 0
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                n += any(v.aval.ndim == 3 and v.aval.shape[:2] == batch_time for v in eqn.invars)
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                n += count(sub)
        return n

    return count(jax.make_jaxpr(jax.grad(lambda s: _loss(nnx.merge(graph, s), tokens)))(state).jaxpr)


def test_projections_on_token_rows_match_tunix(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = compose_conf()
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    model = load_model(conf.model, mesh)  # the builtin tiny Qwen3 (imports rlexp.models.tunix_text: patched)
    tokens = jnp.asarray(np.random.default_rng(0).integers(3, conf.model.vocab_size, size=(4, 9)), jnp.int32)

    patched_loss, patched_grads = nnx.value_and_grad(_loss)(model, tokens)
    patched_3d = _dots_on_3d_activations(model, tokens)
    monkeypatch.setattr(qwen3_lib.Einsum, "__call__", qwen3_lib.Einsum.__call__.__wrapped__)
    monkeypatch.setattr(qwen3_lib.MLP, "block", qwen3_lib.MLP.block.__wrapped__)
    monkeypatch.setattr(qwen3_lib.Embedder, "decode", qwen3_lib.Embedder.decode.__wrapped__)
    tunix_loss, tunix_grads = nnx.value_and_grad(_loss)(model, tokens)
    tunix_3d = _dots_on_3d_activations(model, tokens)

    assert tunix_3d > 0 and patched_3d == 0, (tunix_3d, patched_3d)
    np.testing.assert_allclose(patched_loss, tunix_loss, rtol=1e-6)
    flat_patched = jax.tree.leaves(nnx.state(patched_grads))
    flat_tunix = jax.tree.leaves(nnx.state(tunix_grads))
    assert len(flat_patched) == len(flat_tunix) > 10
    for ours, theirs in zip(flat_patched, flat_tunix, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
