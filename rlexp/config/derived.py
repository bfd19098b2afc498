"""Values derived from a config that several layers need: the trainer mesh.

Each is computed here and nowhere else, so the validation rules, the memory estimate and the trainer
cannot disagree. Pure Python: no JAX.
"""

from __future__ import annotations

from rlexp.config.schema import SliceConfig, TrainerConfig
from rlexp.errors import ConfigError


def trainer_devices(s: SliceConfig) -> int:
    """Devices that hold the trained policy (all of them when rollout is colocated)."""
    return s.devices - s.rollout_devices if s.rollout_devices else s.devices


def resolve_mesh(s: SliceConfig) -> tuple[int, int]:
    """(fsdp, tp) of the trainer mesh; fsdp=-1 takes every trainer device not used by tp."""
    n = trainer_devices(s)
    tp = s.mesh.tp
    if tp < 1 or n % tp:
        raise ConfigError("slice.mesh.tp", tp, f"must divide the {n} trainer devices of slice {s.name}")
    fsdp = n // tp if s.mesh.fsdp == -1 else s.mesh.fsdp
    if fsdp * tp != n:
        raise ConfigError(
            "slice.mesh.fsdp",
            s.mesh.fsdp,
            f"fsdp x tp must equal the {n} trainer devices of slice {s.name}; use -1 to derive it",
        )
    return fsdp, tp


# trainer.kl_estimator -> Tunix's kl_loss_mode / PPO kl_method (tunix.rl.common.compute_kl_divergence)
KL_ESTIMATORS = {"k3": "low_var_kl", "low_var_kl": "low_var_kl", "kl": "kl", "mse": "mse_kl"}


def tunix_kl_mode(t: TrainerConfig) -> str:
    """Tunix's name of the trainer's KL estimator; ConfigError naming the key for any other value."""
    mode = KL_ESTIMATORS.get(t.kl_estimator)
    if mode is None:
        raise ConfigError("trainer.kl_estimator", t.kl_estimator, "use one of k3 (alias low_var_kl), kl, mse")
    return mode
