"""Each algorithm's loss, as rlexp configures Tunix for it, against the formula of its paper on the tiny model.

The policy's per-token log-probs come from the tiny model (one fixed batch: two groups of four completions of
unequal lengths, padded); the old policy's are those shifted by fixed amounts, so the ratios differ from 1 and
some are clipped. The papers' objectives are then computed here in numpy:
- DAPO (Yu et al. 2025, eq. 8): token-level sum over every completion token of the batch, divided by the total
  token count; clip range (1 - eps_low, 1 + eps_high); no KL term;
- Dr. GRPO (Liu et al. 2025, eq. 3): advantage r - mean(r) (no std), per-sequence token sum divided by the
  constant completion budget (not |o_i|), mean over the sequences;
- GSPO (Zheng et al. 2025, eq. 5-7): one ratio per sequence, exp of the mean token log-ratio, clipped per
  sequence, mean over the sequences.
The loss values are also pinned, so a change of Tunix's math or of rlexp's config shows as drift.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import compose_conf

pytestmark = pytest.mark.slow  # one compile of the loss: ~10 s

G = 4
LENGTHS = [5, 3, 6, 1, 6, 4, 2, 6]  # completion tokens of each row; budget 6
REWARDS = np.array([1.0, 0.0, 0.0, 1.1, 0.1, 0.0, 1.0, 0.0])
SHIFT = np.array([0.3, -0.2, 0.15, -0.25, 0.05, 0.4, -0.35, 0.1])  # old logp = logp + shift (per row)


@pytest.fixture(scope="module")
def tiny() -> dict:
    import jax
    from jax.sharding import AxisType, Mesh

    from rlexp.families.load import load_model

    conf = compose_conf()
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    with mesh:
        model = load_model(conf.model, mesh)
    rng = np.random.default_rng(0)
    prompts = np.concatenate([np.zeros((8, 2), np.int32), rng.integers(3, 17, (8, 4), dtype=np.int32)], axis=1)
    completions = np.zeros((8, max(LENGTHS)), np.int32)  # pad id 0
    for row, n in enumerate(LENGTHS):
        completions[row, :n] = rng.integers(3, 17, n)
    return {"model": model, "mesh": mesh, "prompts": prompts, "completions": completions}


def _logps(tiny: dict) -> np.ndarray:
    from flax import nnx
    from tunix.rl import common

    graphdef, state = nnx.split(tiny["model"])
    with tiny["mesh"]:
        out = common.compute_per_token_logps(
            graphdef, state, prompt_tokens=tiny["prompts"], completion_tokens=tiny["completions"], pad_id=0, eos_id=2
        )
    return np.asarray(out, np.float64)


def _example(tiny: dict, advantages: np.ndarray, old_logps: np.ndarray) -> object:
    """Tunix's TrainExample of the fixed batch with these advantages and old-policy log-probs (no reference)."""
    import jax.numpy as jnp
    from tunix.rl.grpo.grpo_learner import TrainExample

    return TrainExample(
        prompt_ids=jnp.asarray(tiny["prompts"]),
        prompt_mask=jnp.asarray(tiny["prompts"] != 0),
        completion_ids=jnp.asarray(tiny["completions"]),
        completion_mask=jnp.asarray(tiny["completions"] != 0),
        ref_per_token_logps=None,
        advantages=jnp.asarray(advantages, jnp.float32),
        old_per_token_logps=jnp.asarray(old_logps, jnp.float32),
    )


def _tunix_loss(tiny: dict, algorithm: str, overrides: list[str]) -> tuple[float, np.ndarray, np.ndarray, object]:
    """(loss, advantages, token mask, algo config) of rlexp's config for `algorithm` on the fixed batch."""
    import importlib

    from tunix.rl import function_registry

    t = compose_conf([f"trainer={algorithm}", *overrides]).trainer
    algo = importlib.import_module(f"rlexp.algorithms.{algorithm}").algorithm_config(t)
    algo.temperature = 1.0
    advantages = function_registry.get_advantage_estimator(algo.advantage_estimator)(rewards=REWARDS, num_generations=G)
    mask = tiny["completions"] != 0
    example = _example(tiny, advantages, _logps(tiny) + SHIFT[:, None])
    loss_fn = function_registry.get_policy_loss_fn(algo.policy_loss_fn)
    with tiny["mesh"]:
        loss, _aux = loss_fn(tiny["model"], example, algo_config=algo, pad_id=0, eos_id=2)
    return float(loss), np.asarray(advantages, np.float64), mask, algo


def _clipped(ratio: np.ndarray, adv: np.ndarray, low: float, high: float) -> np.ndarray:
    return np.minimum(ratio * adv, np.clip(ratio, 1 - low, 1 + high) * adv)


def test_dapo_loss_is_the_papers_token_level_objective(tiny: dict) -> None:
    loss, adv, mask, algo = _tunix_loss(tiny, "dapo", [])
    grouped = REWARDS.reshape(-1, G)
    paper_adv = ((grouped - grouped.mean(1, keepdims=True)) / (grouped.std(1, ddof=1, keepdims=True) + 1e-6)).ravel()
    np.testing.assert_allclose(adv, paper_adv, rtol=1e-6)
    ratio = np.exp(-SHIFT)[:, None] * np.ones(mask.shape)  # pi / pi_old per token
    objective = (_clipped(ratio, adv[:, None], 0.2, 0.28) * mask).sum() / mask.sum()
    assert (algo.epsilon, algo.epsilon_high, algo.beta) == (0.2, 0.28, 0.0)
    assert loss == pytest.approx(-objective, rel=1e-5)
    assert loss == pytest.approx(0.201288998, rel=1e-6)  # pinned


def test_drgrpo_loss_is_the_papers_unnormalised_objective(tiny: dict) -> None:
    loss, adv, mask, _ = _tunix_loss(tiny, "drgrpo", ["trainer.beta=0"])
    grouped = REWARDS.reshape(-1, G)
    np.testing.assert_allclose(adv, (grouped - grouped.mean(1, keepdims=True)).ravel(), rtol=1e-6)
    ratio = np.exp(-SHIFT)[:, None] * np.ones(mask.shape)
    per_sequence = (_clipped(ratio, adv[:, None], 0.2, 0.2) * mask).sum(1) / mask.shape[1]  # / budget, not |o_i|
    assert loss == pytest.approx(-per_sequence.mean(), rel=1e-5)
    assert loss == pytest.approx(0.079526432, rel=1e-6)  # pinned


def test_gspo_loss_is_the_papers_sequence_level_objective(tiny: dict) -> None:
    loss, adv, mask, _ = _tunix_loss(tiny, "gspo", ["trainer.beta=0"])
    log_ratio = -SHIFT  # the same shift on every token of a row: its mean over the row's tokens
    s = np.exp(log_ratio)  # s_i = (pi / pi_old)^(1/|o_i|) over the sequence
    objective = _clipped(s, adv, 0.2, 0.2).mean()
    assert loss == pytest.approx(-objective, rel=1e-5)
    assert loss == pytest.approx(-0.049875267, rel=1e-6)  # pinned


def test_gspo_ratio_is_per_sequence_not_per_token(tiny: dict) -> None:
    """With token log-ratios that differ inside a row, GSPO's ratio is exp(mean), where GRPO averages exp."""
    from tunix.rl import function_registry

    from rlexp.algorithms.gspo import algorithm_config

    algo = algorithm_config(compose_conf(["trainer=gspo", "trainer.beta=0"]).trainer)
    algo.temperature = 1.0
    mask = tiny["completions"] != 0
    logps = _logps(tiny)
    shifts = np.linspace(-0.3, 0.3, mask.size).reshape(mask.shape) * mask
    adv = np.array([1.0, -1.0] * 4)
    example = _example(tiny, adv, logps + shifts)
    with tiny["mesh"]:
        loss, _ = function_registry.get_policy_loss_fn("grpo")(
            tiny["model"], example, algo_config=algo, pad_id=0, eos_id=2
        )
    mean_log_ratio = -(shifts * mask).sum(1) / mask.sum(1)
    expected = -_clipped(np.exp(mean_log_ratio), adv, 0.2, 0.2).mean()
    assert float(loss) == pytest.approx(expected, rel=1e-5)
