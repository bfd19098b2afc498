"""rlexp.perf.trainer: a step's inputs placed in one `device_put` (`one_device_put`), and the train step jitted
with the optimizer first (`optimizer_first`), each with Tunix's values."""

from __future__ import annotations

import re
import warnings

import pytest

from rlexp import perf
from rlexp.compat import patching


def test_inputs_placed_in_one_call_match_tunix_leaf_by_leaf() -> None:
    """Same shardings and values as Tunix's per-leaf `make_array_from_process_local_data`, for every leaf kind a
    step's TrainExample holds (2-D and 1-D arrays, a scalar, host arrays, an absent field)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, Mesh
    from jax.sharding import PartitionSpec as P
    from tunix.sft import sharding_utils

    tunix_shard_input = patching.original(sharding_utils, "shard_input")
    perf.apply(["one_device_put"])
    perf.apply(["one_device_put"])  # once: applying it again does not wrap it again
    try:
        assert sharding_utils.shard_input.__wrapped__ is tunix_shard_input
        mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
        tree = {
            "completion_ids": jnp.arange(48, dtype=jnp.int32).reshape(12, 4),
            "advantages": jnp.linspace(-1, 1, 12),
            "scale": jnp.float32(0.5),
            "prompt_ids": np.arange(96, dtype=np.int32).reshape(12, 8),
            "old_per_token_logps": None,
        }
        with warnings.catch_warnings(), mesh:  # Tunix enters meshes this (deprecated) way: thread_resources
            warnings.simplefilter("ignore", DeprecationWarning)
            ours, theirs = sharding_utils.shard_input(tree, ("fsdp",)), tunix_shard_input(tree, ("fsdp",))
        assert ours["old_per_token_logps"] is None is theirs["old_per_token_logps"]
        for key in ("completion_ids", "advantages", "scale", "prompt_ids"):
            assert isinstance(ours[key], jax.Array), key
            assert ours[key].sharding == theirs[key].sharding, key
            assert ours[key].dtype == theirs[key].dtype, key
            np.testing.assert_array_equal(ours[key], theirs[key])
        specs = {k: ours[k].sharding.spec for k in ("completion_ids", "advantages", "scale")}
        assert specs == {"completion_ids": P("fsdp"), "advantages": P("fsdp"), "scale": P()}
        assert sharding_utils.shard_input(tree, ("fsdp",)) is tree  # no mesh: untouched, as Tunix leaves it
    finally:
        perf.apply([])
    assert sharding_utils.shard_input is tunix_shard_input  # removed: Tunix's own function again


def _trainer(in_place: bool):  # type: ignore[no-untyped-def]
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from tunix.sft import peft_trainer

    class Model(nnx.Module):
        def __init__(self) -> None:
            rngs = nnx.Rngs(0)
            self.up = nnx.Linear(16, 48, use_bias=False, rngs=rngs)
            self.down = nnx.Linear(48, 16, rngs=rngs)

        def __call__(self, x):  # type: ignore[no-untyped-def]
            return self.down(jnp.tanh(self.up(x)))

    def loss_fn(model, x):  # type: ignore[no-untyped-def]
        return ((model(x) - 1.0) ** 2).mean()

    config = peft_trainer.TrainingConfig(eval_every_n_steps=100, max_steps=10)
    trainer = peft_trainer.PeftTrainer(Model(), optax.adamw(1e-2), config).with_loss_fn(loss_fn)
    return trainer


@pytest.mark.slow
def test_the_train_step_updates_adam_s_state_in_its_own_buffers_with_tunix_s_values() -> None:
    """Tunix donates the optimizer but lists the model first among the step's outputs, so JAX handed the first
    moments' buffers to the params and the second moments' to the first (XLA copied around that every step).
    `optimizer_first` jits the same step with the optimizer first: each part keeps its buffers, and
    two steps give Tunix's values bit for bit."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    def parts(trainer):  # type: ignore[no-untyped-def]
        adam = trainer.optimizer.opt_state[0]
        return {"params": nnx.state(trainer.model, nnx.Param), "mu": adam.mu, "nu": adam.nu}

    def pointers(tree) -> list[int]:  # type: ignore[no-untyped-def]
        return [leaf.unsafe_buffer_pointer() for leaf in jax.tree.leaves(tree)]

    x = jnp.linspace(-1.0, 1.0, 8 * 16).reshape(8, 16)
    results = {}
    for in_place in (False, True):
        perf.apply(["optimizer_first"] if in_place else [])
        trainer = _trainer(in_place)
        train_step, _ = trainer.jit_train_and_eval_step(cache_nnx_graph=True)
        train_step({"x": x})  # compiled; the buffers from here on are the step's own outputs
        before = {k: pointers(v) for k, v in parts(trainer).items()}
        loss, _, _ = train_step({"x": x})
        after = {k: pointers(v) for k, v in parts(trainer).items()}
        results[in_place] = (float(loss), jax.tree.map(np.asarray, parts(trainer)), before, after)
    (loss, tunix_values, before, after), (our_loss, our_values, our_before, our_after) = results[False], results[True]
    assert after["params"] == before["mu"] and after["mu"] == before["nu"]  # Tunix's jit: shifted by one
    assert our_after["mu"] == our_before["mu"] and our_after["nu"] == our_before["nu"]  # in place
    assert our_loss == loss
    jax.tree.map(np.testing.assert_array_equal, our_values, tunix_values)


@pytest.mark.slow
def test_the_user_command_s_train_step_copies_no_optimizer_state(user_command_programs: dict[str, str]) -> None:
    """`python -m rlexp` as typed: XLA's dump of its compiled train step holds no copy of Adam's state (Tunix's jit
    made one of each moment tensor around every update) and gives each donated buffer back to its own output."""
    (text,) = [t for name, t in user_command_programs.items() if "jit__train_step" in name]
    assert not re.findall(r"= f32\[[\d,]*\]\{[\d,]*\} copy\(%optimizer_states", text)
    aliases = re.findall(r"\{(\d+)\}: \((\d+), \{\}", text.splitlines()[0])
    assert len(aliases) > 10 and all(out == param for out, param in aliases), aliases
