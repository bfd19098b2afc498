"""qwix LoRA on every family: adapters on the projections, and merging them reproduces the adapted model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.helpers import compose_conf
from tests.models.parity import max_rel_error, rlexp_logits


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    import torch  # noqa: F401 - the reference implementations need it

    from rlexp.models.tiny_random import write

    return {f: write(f, tmp_path_factory.mktemp(f)) for f in ("gemma4", "gpt_oss")}


@pytest.mark.slow
# gpt-oss adapters (q/k/v/o, contraction-first) are merged like the tiny Qwen3 export test checks; gemma4 adds
# kv_einsum, whose adapter axes differ from the weight's
@pytest.mark.parametrize("family", ["gemma4"])
def test_merged_adapters_equal_the_adapted_model(family, tiny_dirs):
    from rlexp.families.load import load_model
    from rlexp.models.lora import apply_lora, merged_state

    cfg = compose_conf([f"model={family}_tiny", f"model.path={tiny_dirs[family]}", "trainer.lora.rank=4"])
    adapted = apply_lora(load_model(cfg.model, None), cfg.trainer.lora, None)
    lora_state = nnx.state(adapted, nnx.LoRAParam)
    names = {".".join(str(getattr(p, "key", p)) for p in path) for path, _ in
             jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(lora_state))[0]}  # fmt: skip
    expected = {"gemma4": ("q_einsum", "kv_einsum", "attn_vec_einsum", "gate_proj"), "gpt_oss": ("q_proj", "o_proj")}
    assert all(any(e in n for n in names) for e in expected[family]), names
    # numpy's draws: jax.random.normal compiled a program per adapter shape (~15 s on a shared CPU)
    rng = np.random.default_rng(1)
    nnx.update(adapted, jax.tree_util.tree_map(lambda x: 0.1 * rng.standard_normal(x.shape, np.float32), lora_state))

    merged = load_model(cfg.model, None)
    flat = merged_state(adapted, cfg.trainer.lora.alpha, cfg.trainer.lora.rank)
    state = nnx.to_pure_dict(nnx.state(merged, nnx.Param))
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    new = [flat[".".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)] for path, _ in leaves]
    nnx.update(merged, jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(state), new))
    changed = [k for (path, old) in leaves for k in [".".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)]
               if not np.allclose(np.asarray(old), flat[k])]  # fmt: skip
    assert any("attn" in k for k in changed)  # the adapters moved the projections they sit on
    tokens = np.array([[3, 4, 5, 6, 7, 8, 9, 10, 11]])
    assert max_rel_error(rlexp_logits(merged, tokens), rlexp_logits(adapted, tokens)) <= 1e-5


@pytest.mark.slow
def test_bf16_compute_over_float32_weights_gets_every_adapter_and_keeps_its_dtype(tiny_dirs):
    """gpt-oss's attention holds k and v of one shape; qwix's eager first pass could tell neither cast weight
    apart, so they got no adapter and the first traced pass failed (rlexp.models.lora._plain_first_pass)."""
    from rlexp.families.load import load_model
    from rlexp.models.lora import apply_lora

    overrides = ["model=gpt_oss_tiny", f"model.path={tiny_dirs['gpt_oss']}", "trainer.lora.rank=4"]
    cfg = compose_conf([*overrides, "model.dtype=bfloat16", "model.param_dtype=float32"])
    adapted = apply_lora(load_model(cfg.model, None), cfg.trainer.lora, None)
    lora = {
        ".".join(str(getattr(p, "key", p)) for p in path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(adapted, nnx.LoRAParam)))[0]
    }
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert any(f"attn.{proj}_lora_a" in name for name in lora), (proj, sorted(lora))
    assert {leaf.dtype for leaf in lora.values()} == {np.dtype("float32")}  # adapters train in float32
    dtypes = {node.cfg.dtype for _, node in nnx.iter_graph(adapted) if hasattr(node, "cfg")}
    assert dtypes == {jax.numpy.bfloat16}  # the first pass's float32 compute did not stay
    tokens = np.array([[3, 4, 5, 6, 7, 8, 9, 10, 11]])
    assert np.isfinite(np.asarray(rlexp_logits(adapted, tokens), np.float32)).all()


@pytest.mark.slow
def test_adapters_under_remat_full_train_as_without_it():
    """`model.remat=full` runs the layers as copies inside nnx.remat, where qwix's first pass saw no projection
    ("matched no projection"); the pass now runs without remat, and the adapters apply inside it afterwards."""
    from tunix.models.qwen3 import model as qwen3_lib

    from rlexp.families.load import load_model
    from rlexp.models.lora import apply_lora

    def adapted(extra: list[str]):
        cfg = compose_conf(["trainer.lora.rank=4", *extra])
        return apply_lora(load_model(cfg.model, None), cfg.trainer.lora, None)

    remat, plain = adapted(["model.remat=full"]), adapted([])
    assert {layer.config.remat_config for layer in remat.layers} == {qwen3_lib.RematConfig.DECODER}
    tokens = jnp.asarray([[3, 4, 5, 6, 7, 8, 9, 10, 11], [11, 10, 9, 8, 7, 6, 5, 4, 3]])
    positions = jnp.tile(jnp.arange(9)[None], (2, 1))
    mask = jnp.tile(jnp.tril(jnp.ones((9, 9), dtype=bool))[None], (2, 1, 1))

    @nnx.jit  # one compiled program per model: op by op, the two backward passes compiled ~400 programs (~30 s)
    def lora_grads(model):
        def loss(model):
            logits, _ = model(tokens, positions, None, mask)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 3])

        grads = nnx.grad(loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(model)
        return nnx.to_pure_dict(nnx.state(grads, nnx.LoRAParam))

    ours, theirs = lora_grads(remat), lora_grads(plain)
    leaves = jax.tree_util.tree_leaves(theirs)
    assert len(leaves) == 2 * 7 * len(plain.layers)  # a and b on q, k, v, o, gate, up, down in every layer
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(theirs)
    assert any(float(jnp.abs(g).max()) > 0 for g in leaves)
    for a, b in zip(jax.tree_util.tree_leaves(ours), leaves, strict=True):
        # compiled, the remat program and the plain one sum in another order: 3e-7 apart on gradients of ~1e-2
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "gpt_oss"])
def test_the_compiled_first_pass_makes_the_adapters_qwix_s_eager_pass_makes(family, tiny_dirs, monkeypatch):
    """rlexp runs qwix's first pass (which creates the adapters) as one compiled program; qwix's own runs it op by
    op. The same adapters, bit for bit: the builtin tiny Qwen3, and gpt-oss at bf16 compute over float32 weights
    (k and v of one shape, told apart by identity inside the pass)."""
    import qwix

    from rlexp.families.load import load_model
    from rlexp.models import lora

    extra = [] if family == "qwen3" else ["model=gpt_oss_tiny", f"model.path={tiny_dirs['gpt_oss']}"]
    cfg = compose_conf([*extra, "trainer.lora.rank=4", "model.dtype=bfloat16", "model.param_dtype=float32"])

    def adapters() -> dict:
        state = nnx.state(lora.apply_lora(load_model(cfg.model, None), cfg.trainer.lora, None, seed=3), nnx.LoRAParam)
        return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(state)}

    compiled = adapters()
    own = qwix.apply_lora_to_model
    monkeypatch.setattr(lora, "_compiled_first_pass", lambda *_: None)
    monkeypatch.setattr(qwix, "apply_lora_to_model", lambda *a, skip_nnx_init, **kw: own(*a, **kw))
    eager = adapters()
    assert compiled.keys() == eager.keys() and len(compiled) >= 8
    assert all(np.array_equal(compiled[k], eager[k]) for k in compiled)
    assert any(np.abs(v).sum() > 0 for v in compiled.values())  # A is drawn, B starts at zero
