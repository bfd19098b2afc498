"""Each algorithm's loss, as rlexp configures Tunix for it, against TRL's (an implementation rlexp did not write).

The same per-token log-probabilities, old-policy and reference log-probabilities, advantages and completion mask
go to rlexp's loss (Tunix's policy loss function with the algorithm config its module in `rlexp.algorithms` builds; the
model's log-probs are the differentiated input) and to TRL 1.16's `GRPOTrainer._compute_loss` (called on a
stand-in `self` holding only what that method reads); the loss values and their gradients with respect to the
current log-probs (jax.grad on rlexp's side, torch autograd on TRL's) must agree to float32 rounding. Each case
runs as iteration 1 of `num_iterations` (no old log-probs: the ratio is exactly 1) and as a later iteration
(old log-probs differ from the current ones, so ratios move and some are clipped).

Where the objectives coincide, TRL is the reference:
- grpo (k3 KL): TRL `loss_type="grpo"` (per-sequence token mean, then mean over sequences; k3 KL per token);
- drgrpo: TRL `loss_type="dr_grpo"` (token sum / (sequences x completion budget)), with `max_completion_length`
  the padded width, as Tunix's "sequence-mean-token-scale" divides by it;
- dapo: TRL `loss_type="dapo"` (token sum over the batch / its token count), clip (1 - 0.2, 1 + 0.28), no KL;
- gspo: TRL `importance_sampling_level="sequence"` with `loss_type="grpo"`: Tunix's "gspo-token" loss has the
  same value and the same gradient when the sequence's advantage is shared by its tokens (GSPO eq. 5-7);
- ppo: Tunix's PPO policy loss is the clipped surrogate with per-token (GAE) advantages, token mean over the batch:
  TRL's `loss_type="bnpo"` with (B, T) advantages, which `_compute_loss` accepts as they are.
Where TRL differs, the paper's formula is written out here in torch:
- the `kl` and `mse` estimators (MaxText's seed presets use `kl`): TRL hard-codes k3, so the KL term is
  beta x (log pi - log pi_ref) or beta x (log pi - log pi_ref)^2 / 2 per token, aggregated as the policy term,
  added to TRL's policy loss computed with beta=0.
"""

from __future__ import annotations

import importlib
import types
from collections import defaultdict

import numpy as np
import pytest

from tests.helpers import compose_conf

pytestmark = pytest.mark.slow  # imports torch and TRL: ~30 s on a shared 2-core machine

G = 4
LENGTHS = [5, 3, 6, 1, 6, 4, 2, 6]  # completion tokens of each row; width 6 = the completion budget
REWARDS = np.array([1.0, 0.0, 0.0, 1.1, 0.1, 0.0, 1.0, 0.0])
B, T = len(LENGTHS), max(LENGTHS)
MASK = (np.arange(T)[None, :] < np.array(LENGTHS)[:, None]).astype(np.float32)


def _batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    logps = -rng.uniform(0.05, 3.0, (B, T))
    return {
        "logps": logps.astype(np.float32),
        # a later iteration: the policy moved since the rollout by up to +-0.4 per token, so some ratios clip
        "old": (logps + rng.uniform(-0.4, 0.4, (B, T))).astype(np.float32),
        "ref": (logps + rng.normal(0.0, 0.3, (B, T))).astype(np.float32),
        "token_adv": rng.normal(0.0, 1.0, (B, T)).astype(np.float32),  # PPO's GAE advantages, per token
    }


def _rlexp(algorithm: str, overrides: list[str], batch: dict, iteration: int, monkeypatch) -> tuple:
    """(loss, d loss / d logps, algo config, advantages) of rlexp's loss for `algorithm` on the batch."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from tunix.rl import common, function_registry
    from tunix.rl.grpo.grpo_learner import TrainExample

    from rlexp.algorithms.ppo import ppo_config

    t = compose_conf([f"trainer={algorithm}", *overrides]).trainer
    if algorithm == "ppo":
        algo, adv = ppo_config(t), batch["token_adv"]
    else:
        algo = importlib.import_module(f"rlexp.algorithms.{algorithm}").algorithm_config(t)
        algo.temperature = 1.0
        estimator = function_registry.get_advantage_estimator(algo.advantage_estimator)
        adv = np.asarray(estimator(rewards=REWARDS, num_generations=G), np.float32)
    current: dict = {}
    # The model's forward pass is replaced by the batch's log-probs, the input that is differentiated.
    monkeypatch.setattr(common, "compute_per_token_logps", lambda *a, **k: (current["lp"], jnp.zeros((B, T, 3))))
    loss_fn = function_registry.get_policy_loss_fn(algo.policy_loss_fn)
    stand_in = nnx.Linear(1, 1, rngs=nnx.Rngs(0))  # nnx.split(model) needs a module; its weights are unused
    uses_ref = float(getattr(algo, "beta", 0.0) or 0.0) > 0 and algorithm != "ppo"

    # Tunix's GRPO learners pass no old log-probs at num_iterations=1 (the ratio is 1 by stop_gradient); its PPO
    # learner always passes them, equal to the current ones on the first iteration
    old = jnp.asarray(batch["old"]) if iteration > 1 else jnp.asarray(batch["logps"]) if algorithm == "ppo" else None

    def loss(lp: jax.Array) -> jax.Array:
        current["lp"] = lp
        example = TrainExample(
            prompt_ids=jnp.ones((B, 2), jnp.int32),
            prompt_mask=jnp.ones((B, 2), jnp.bool_),
            completion_ids=jnp.ones((B, T), jnp.int32),
            completion_mask=jnp.asarray(MASK),
            ref_per_token_logps=jnp.asarray(batch["ref"]) if uses_ref else None,
            advantages=jnp.asarray(adv),
            old_per_token_logps=old,
        )
        return loss_fn(stand_in, example, algo_config=algo, pad_id=0, eos_id=2)[0]

    value, grad = jax.value_and_grad(loss)(jnp.asarray(batch["logps"]))
    return float(value), np.asarray(grad), algo, adv, uses_ref


def _trl(loss_type: str, level: str, beta: float, eps: tuple[float, float], batch: dict, adv, iteration: int):
    """(loss, d loss / d logps, the logps tensor) of TRL 1.16's GRPOTrainer._compute_loss on the batch."""
    import torch
    from trl.trainer.grpo_trainer import GRPOTrainer

    lp = torch.tensor(batch["logps"], requires_grad=True)
    accelerator = types.SimpleNamespace(
        num_processes=1, reduce=lambda x, reduction: x, gather=lambda x: x, gather_for_metrics=lambda x: x
    )
    stand_in = types.SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (lp, torch.zeros(B, T), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None),
        loss_type=loss_type,
        epsilon_low=eps[0],
        epsilon_high=eps[1],
        use_vllm=False,
        model=types.SimpleNamespace(training=False),  # eval mode: no gradient-accumulation rescaling
        max_completion_length=T,
        accelerator=accelerator,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    mask = torch.tensor(MASK)
    inputs = {
        "prompt_ids": torch.ones(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": torch.tensor(adv),
        "ref_per_token_logps": torch.tensor(batch["ref"]),
        "num_items_in_batch": mask.sum(),
    }
    if iteration > 1:
        inputs["old_per_token_logps"] = torch.tensor(batch["old"])
    loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    return loss, lp


def _assert_same(ours: tuple, theirs: tuple) -> None:
    (value, grad), (loss, lp) = ours, theirs
    loss.backward()
    assert value == pytest.approx(float(loss.detach()), rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(grad, lp.grad.numpy(), rtol=1e-4, atol=1e-7)
    assert np.abs(grad).max() > 1e-3  # the gradient is not trivially zero
    assert not grad[MASK == 0].any()  # padding gets none


# algorithm -> (rlexp overrides, TRL loss_type, TRL importance_sampling_level, clip (low, high))
CASES = {
    "grpo": ([], "grpo", "token", (0.2, 0.2)),
    "drgrpo": ([], "dr_grpo", "token", (0.2, 0.2)),
    "dapo": ([], "dapo", "token", (0.2, 0.28)),
    "gspo": ([], "grpo", "sequence", (0.2, 0.2)),
    "ppo": ([], "bnpo", "token", (0.2, 0.2)),
}


@pytest.mark.parametrize("iteration", [1, 2])
@pytest.mark.parametrize("algorithm", list(CASES))
def test_loss_and_gradient_equal_trls(algorithm: str, iteration: int, monkeypatch) -> None:
    overrides, loss_type, level, eps = CASES[algorithm]
    batch = _batch()
    value, grad, algo, adv, uses_ref = _rlexp(algorithm, overrides, batch, iteration, monkeypatch)
    beta = float(algo.beta) if uses_ref else 0.0
    assert uses_ref == (algorithm in ("grpo", "drgrpo", "gspo"))  # the options' defaults: KL on, DAPO none
    if uses_ref:
        assert algo.kl_loss_mode == "low_var_kl"  # k3: the one TRL implements
    _assert_same((value, grad), _trl(loss_type, level, beta, eps, batch, adv, iteration))


@pytest.mark.parametrize("iteration", [1, 2])
@pytest.mark.parametrize("estimator", ["kl", "mse", "k3", "low_var_kl"])
def test_grpo_kl_estimators_are_the_formulas(estimator: str, iteration: int, monkeypatch) -> None:
    """TRL has only k3: the KL term is written out (see the module docstring) and added to TRL's policy loss."""
    import torch

    batch = _batch()
    overrides = [f"trainer.kl_estimator={estimator}", "trainer.beta=0.3"]  # a large beta: the term shows
    value, grad, algo, adv, _ = _rlexp("grpo", overrides, batch, iteration, monkeypatch)
    loss, lp = _trl("grpo", "token", 0.0, (0.2, 0.2), batch, adv, iteration)
    d = lp - torch.tensor(batch["ref"])  # log pi - log pi_ref
    per_token = {"kl": d, "mse": d.square() / 2}.get(estimator, torch.exp(-d) + d - 1)  # k3: r - 1 - log r
    mask = torch.tensor(MASK)
    kl_term = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    _assert_same((value, grad), (loss + 0.3 * kl_term, lp))


def test_ppo_kl_penalty_uses_the_estimator() -> None:
    """PPO's KL penalty (subtracted from the per-token reward) is computed with trainer.kl_estimator."""
    from tunix.rl import common

    from rlexp.config.derived import tunix_kl_mode

    batch = _batch()
    for estimator, formula in [("k3", lambda d: np.exp(-d) + d - 1), ("kl", lambda d: d), ("mse", lambda d: d * d / 2)]:
        t = compose_conf(["trainer=ppo", f"trainer.kl_estimator={estimator}"]).trainer
        from rlexp.algorithms.ppo import ppo_config

        mode = ppo_config(t).kl_method
        assert mode == tunix_kl_mode(t)
        kl = np.asarray(common.compute_kl_divergence(batch["logps"], batch["ref"], mode))
        np.testing.assert_allclose(kl, formula(batch["logps"] - batch["ref"]), rtol=1e-5, atol=1e-6)
