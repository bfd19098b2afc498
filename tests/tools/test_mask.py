"""Tool outputs are out of the policy loss: the loss and its gradient do not change when the tool-output tokens
(and the reference log-probs at them) change, on the tiny model, through Tunix's own GRPO loss."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlexp.train.episodes import Episodes
from tests.helpers import compose_conf

PROMPT = [1, 3, 4, 5, 6]
MODEL, TOOL = [7, 8, 9, 10, 2], [11, 12, 13]  # an episode cut by its budget right after a tool's result
WIDTH = 12


def _loss_and_grad(model, tool_tokens: list[int], ref_at_tool: float, use_episode_mask: bool):  # noqa: ANN001, ANN202
    from flax import nnx
    from tunix.rl import function_registry
    from tunix.rl.common import TrainExample
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    tokens = np.array([MODEL + tool_tokens], dtype=np.int32)
    ep = Episodes([""], [tokens[0]], [np.array([1] * len(MODEL) + [0] * len(tool_tokens), bool)], None,
                  [2], [1], [0], [True], [[]])  # fmt: skip
    completion = np.zeros((1, WIDTH), np.int32)
    completion[0, : tokens.shape[1]] = tokens
    mask = ep.padded_mask(WIDTH) if use_episode_mask else completion != 0
    ref = np.full((1, WIDTH), -2.0, np.float32)
    ref[0, len(MODEL) : len(MODEL) + len(TOOL)] = ref_at_tool
    example = TrainExample(
        prompt_ids=jnp.array([PROMPT]),
        prompt_mask=jnp.array([PROMPT]) != 0,
        completion_ids=jnp.array(completion),
        completion_mask=jnp.array(mask),
        ref_per_token_logps=jnp.array(ref),
        advantages=jnp.array([1.5]),
        old_per_token_logps=None,
    )
    algo = GRPOConfig(num_generations=2, beta=0.04)
    algo.temperature = 1.0  # the learner sets it from the rollout config
    loss_fn = function_registry.get_policy_loss_fn(algo.policy_loss_fn)

    def loss(m):  # noqa: ANN001, ANN202
        return loss_fn(m, example, algo_config=algo, pad_id=0, eos_id=2)[0]

    value, grads = nnx.value_and_grad(loss)(model)
    return float(value), jax.tree.leaves(nnx.to_pure_dict(grads))


@pytest.fixture(scope="module")
def model():  # noqa: ANN201
    from flax import nnx

    from rlexp.models import tunix_text

    return tunix_text.Qwen3(tunix_text.qwen3_config(compose_conf(["model=tiny_tools"]).model), rngs=nnx.Rngs(0))


@pytest.mark.slow
def test_loss_and_gradient_ignore_the_tool_output_tokens(model) -> None:  # noqa: ANN001
    base_loss, base_grads = _loss_and_grad(model, TOOL, -1.0, use_episode_mask=True)
    other_loss, other_grads = _loss_and_grad(model, [30, 31, 32], -9.0, use_episode_mask=True)
    assert base_loss == other_loss
    for a, b in zip(base_grads, other_grads, strict=True):
        np.testing.assert_array_equal(a, b)
    # the pad-only mask Tunix builds would train on the tool's tokens: the same change moves the loss
    pad_loss, _ = _loss_and_grad(model, TOOL, -1.0, use_episode_mask=False)
    pad_other, _ = _loss_and_grad(model, [30, 31, 32], -9.0, use_episode_mask=False)
    assert pad_loss != pad_other
