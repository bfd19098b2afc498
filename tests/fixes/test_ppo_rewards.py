"""rlexp.fixes.tunix_ppo_rewards: Tunix's PPO token rewards are float32, not truncated to int32."""

from __future__ import annotations

import inspect

from rlexp.compat import patching
from rlexp.fixes import tunix_ppo_rewards


def test_the_fix_changes_one_line_of_tunix_at_its_own_lines() -> None:
    from tunix.rl.ppo import ppo_learner

    tunix_ppo_rewards.install()
    fixed = ppo_learner.PPOLearner._generate_and_compute_advantage
    tunix = patching.original(ppo_learner.PPOLearner, "_generate_and_compute_advantage")
    assert fixed.rlexp_patch == "tunix_ppo_rewards" and inspect.unwrap(fixed) is tunix
    assert tunix_ppo_rewards.FLOAT_REWARDS not in inspect.getsource(tunix)
    assert "float32" in fixed.__code__.co_consts or "float32" in fixed.__code__.co_names
    assert "float32" not in tunix.__code__.co_names  # Tunix's own builds int32 rewards
    assert (fixed.__code__.co_filename, fixed.__code__.co_firstlineno) == (
        tunix.__code__.co_filename,
        tunix.__code__.co_firstlineno,
    )
