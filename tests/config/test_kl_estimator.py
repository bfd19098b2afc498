"""`trainer.kl_estimator`: the paper's per algorithm, MaxText's for the seed presets, one key (PPO's old one refused)."""

from __future__ import annotations

import pytest

from rlexp.config.derived import tunix_kl_mode
from tests.helpers import compose_conf, run_rlexp


@pytest.mark.parametrize(
    ("overrides", "mode"),
    [
        (["trainer=grpo"], "low_var_kl"),  # Shao et al. 2024, eq. 4: k3
        (["trainer=drgrpo"], "low_var_kl"),
        (["trainer=gspo"], "low_var_kl"),
        (["trainer=ppo"], "low_var_kl"),
        (["trainer.kl_estimator=low_var_kl"], "low_var_kl"),
        (["trainer.kl_estimator=kl"], "kl"),
        (["trainer.kl_estimator=mse"], "mse_kl"),
        (["experiment=gemma4_e4b_omi2"], "kl"),  # MaxText's: Tunix's default
        (["experiment=gemma4_26b_a4b_omi2"], "kl"),
        (["experiment=qwen3_30b_a3b_omi2"], "kl"),
        (["experiment=gpt_oss_20b_gsm8k"], "kl"),
    ],
)
def test_estimator_per_option(overrides: list[str], mode: str) -> None:
    assert tunix_kl_mode(compose_conf(overrides).trainer) == mode


def test_unknown_estimator_and_old_key_are_refused_in_one_line() -> None:
    proc = run_rlexp("trainer.kl_estimator=k2", "--cfg", "job")
    assert proc.returncode != 0
    assert "trainer.kl_estimator='k2': use one of k3 (alias low_var_kl), kl, mse" in proc.stderr
    proc = run_rlexp("trainer=ppo", "trainer.ppo.kl_method=kl", "--cfg", "job")
    assert proc.returncode != 0 and "did you mean trainer.kl_estimator?" in proc.stderr
