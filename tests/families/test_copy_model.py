"""rlexp.families.load.copy_model, the reference policy a session makes from the loaded policy: every weight is what
a second read of the checkpoint gives (the reference it replaces), bit for bit, on the policy's shardings, in
buffers of its own that outlive the policy's (the train step donates those). The default run's numbers with it:
tests/train/test_pinned_metrics.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import compose_conf


@pytest.mark.parametrize("family", ["tiny", pytest.param("gemma4", marks=pytest.mark.slow)])
def test_the_copy_is_a_second_read_of_the_checkpoint_in_buffers_of_its_own(family: str, tmp_path: Path) -> None:
    import jax
    import numpy as np
    from flax import nnx
    from jax.sharding import AxisType, Mesh

    from rlexp.families.load import copy_model, load_model
    from rlexp.models.tiny_random import write

    # gemma4: per-layer embeddings and KV sharing, a module tree unlike the builtin Qwen3-shaped tiny's
    overrides = [] if family == "tiny" else ["model=gemma4_tiny", f"model.path={write('gemma4', tmp_path / 'ckpt')}"]
    conf = compose_conf(overrides)
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    policy = load_model(conf.model, mesh)
    reread = nnx.state(load_model(conf.model, mesh))  # the reference as a session loaded it before
    reference = copy_model(policy)
    assert type(reference) is type(policy) and reference is not policy
    mine, theirs = jax.tree.leaves_with_path(nnx.state(reference)), jax.tree.leaves_with_path(nnx.state(policy))
    assert [p for p, _ in mine] == [p for p, _ in jax.tree.leaves_with_path(reread)] == [p for p, _ in theirs]
    for (path, got), (_, want), (_, source) in zip(mine, jax.tree.leaves_with_path(reread), theirs, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape, path
        assert np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8)), path
        assert got.sharding == source.sharding, path
        assert got.unsafe_buffer_pointer() != source.unsafe_buffer_pointer(), path
    for _, leaf in theirs:  # what donating the policy's buffers to a train step does to them
        leaf.delete()
    assert all(np.isfinite(np.asarray(leaf, np.float32)).all() for _, leaf in mine)
