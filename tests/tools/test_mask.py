"""Tool outputs are out of the policy loss: the actor trains on the episode mask (tool outputs 0, model tokens 1)
when the tools demo's learner rolls out episodes, and the loss and its gradient do not change when the tool-output
tokens (and the reference log-probs at them) change, on the tiny model, through Tunix's own GRPO loss."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlexp.train.episodes import Episodes
from tests.faults import SMALL_BATCH
from tests.helpers import compose_conf

PROMPT = [1, 3, 4, 5, 6]
MODEL, TOOL = [7, 8, 9, 10, 2], [11, 12, 13]  # an episode cut by its budget right after a tool's result
WIDTH = 12


@functools.cache
def _value_and_grad():  # noqa: ANN202
    """Tunix's GRPO policy loss of (model, TrainExample) and its gradient, compiled once: every call of the tests
    has the same shapes (one program, not the loss's ops one by one on each call)."""
    from flax import nnx
    from tunix.rl import function_registry
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    algo = GRPOConfig(num_generations=2, beta=0.04)
    algo.temperature = 1.0  # the learner sets it from the rollout config
    loss_fn = function_registry.get_policy_loss_fn(algo.policy_loss_fn)

    @nnx.jit
    def value_and_grad(model, example):  # noqa: ANN001, ANN202
        return nnx.value_and_grad(lambda m: loss_fn(m, example, algo_config=algo, pad_id=0, eos_id=2)[0])(model)

    return value_and_grad


def _loss_and_grad(model, tool_tokens: list[int], ref_at_tool: float, use_episode_mask: bool):  # noqa: ANN001, ANN202
    from flax import nnx
    from tunix.rl.common import TrainExample

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
    value, grads = _value_and_grad()(model, example)
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


def _expected_mask(ids: list[int], tokenizer) -> list[int]:  # noqa: ANN001
    """The mask an episode's completion should train under, found from its tokens alone (not from the runner's
    mask): 1 for every token up to and including the model's first <|im_end|>, 0 from there through the next
    assistant header (the tool's <tool_response> block and the turn markers around it), 1 for the model's answer
    after it; a single-turn completion is all 1."""
    end = tokenizer.eos_token_id  # <|im_end|>: the end of a model turn
    header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    if end not in ids[:-1]:
        return [1] * len(ids)
    first = ids.index(end) + 1
    starts = [i for i in range(first, len(ids)) if ids[i : i + len(header)] == header]
    stop = starts[0] + len(header) if starts else len(ids)  # an episode cut by its budget ends in the environment
    return [1] * first + [0] * (stop - first) + [1] * (len(ids) - stop)


@pytest.mark.slow  # builds the demo's cluster and trains one step (~30 s on 2 cores)
def test_the_demo_learner_trains_tool_outputs_under_mask_0(tmp_path) -> None:  # noqa: ANN001
    """The tools demo's learner (`experiment=tools_demo`: tiny_tools, the calculator, rlexp.train.episodes'
    EpisodeRunner installed on Tunix's GRPO learner as the session installs it) trains one step on real rollouts;
    the TrainExamples the actor trainer receives carry mask 0 on every tool-output token and 1 on every model
    token. Checked to fail: with `install`'s mask replacement removed (the example returned with Tunix's pad-only
    completion_mask), the <tool_response> tokens arrive with mask 1 and this test fails."""
    import numpy as np

    from rlexp.data.registry import load_splits
    from rlexp.data.templates import prompt_width, render_splits
    from rlexp.families.load import load_model
    from rlexp.models.loader import load_tokenizer
    from rlexp.rewards.compose import build_rewards
    from rlexp.tools.toolbox import tools_prompt
    from rlexp.train.cluster import build_cluster, build_learner, build_meshes
    from rlexp.train.episodes import EpisodeRunner, install
    from rlexp.train.metrics import MetricsCollector

    # 2 prompts x 4 episodes: the shapes of tests/faults.py's tool workload and tests/tools/test_demo_e2e.py's short runs
    conf = compose_conf(["experiment=tools_demo", *SMALL_BATCH, "trainer.max_steps=1", "logger=none"])
    tokenizer = load_tokenizer(conf.model)
    splits = render_splits(load_splits(conf.dataset), conf.data_template, conf.chat_template, tokenizer,
                           conf.trainer.max_prompt_tokens, tools_prompt(conf))  # fmt: skip
    rows = splits.train[:2]
    meshes = build_meshes(conf)
    actor, reference = load_model(conf.model, meshes[0]), load_model(conf.model, meshes[0])
    width = prompt_width([r["prompt"] for r in rows], tokenizer, conf.trainer.max_prompt_tokens)
    cluster = build_cluster(conf, actor, reference, tokenizer, meshes, MetricsCollector(), str(tmp_path), width)
    rewards = build_rewards(conf.reward, conf.trainer.num_generations)
    learner = build_learner(conf, cluster, rewards.fns, [])
    runner = EpisodeRunner(conf, tokenizer)
    install(learner, runner)
    received: list = []  # what the actor trainer trains on
    update_actor = cluster.update_actor

    def recorded(train_ds):  # noqa: ANN001, ANN202
        for example in train_ds:
            received.append(example)
            yield example

    cluster.update_actor = lambda train_ds, eval_ds, skip_jit=False: update_actor(recorded(train_ds), eval_ds, skip_jit)
    g = conf.trainer.num_generations
    batch = {"prompts": np.array([r["prompt"] for r in rows])}  # one step's batch, as rlexp.train.session builds it
    batch |= {k: np.array([str(r[k]) for r in rows]) for k in rows[0] if k not in ("prompt", "question")}
    try:
        learner.train([batch])
    finally:
        rewards.close()
        runner.tools.close()
    ids = np.concatenate([np.asarray(e.completion_ids) for e in received])
    mask = np.concatenate([np.asarray(e.completion_mask) for e in received]).astype(int)
    assert ids.shape[0] == 2 * g and sum(runner.last.tool_calls) > 0  # the seeded demo calls its tool
    response = tokenizer.encode("<tool_response>", add_special_tokens=False)[0]
    tool_rows = 0
    for row, m in zip(ids.tolist(), mask.tolist(), strict=True):
        n = len(row) - next((i for i, t in enumerate(reversed(row)) if t != tokenizer.pad_token_id), len(row))
        assert m[:n] == _expected_mask(row[:n], tokenizer), tokenizer.decode(row[:n])
        assert not any(m[n:])  # padding stays out
        if response in row[:n]:
            tool_rows += 1
            assert m[row.index(response)] == 0 and m[0] == 1
    assert tool_rows > 0
