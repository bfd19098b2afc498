"""Bounded staleness (`trainer.off_policy.max_staleness`): the rules of the key and what it changes in a run's plan.

With k = max_staleness > 0 the rollout of step t samples with the weights of step max(0, t - 1 - k): up to k
batches are sampled ahead of the update that trains on them (verl `async_training.staleness_threshold`, prime-rl
`max_off_policy_steps`, NeMo-RL `async_grpo.max_trajectory_age_steps`, TRL `AsyncGRPOConfig.max_staleness`). The
version is exact, not "at least": a run samples each batch with the same weights whatever the timing, so it is
reproducible and resumes to the same numbers. With rollout devices of their own (`slice.rollout_devices > 0`) a
thread samples while the trainer updates (`concurrent`); colocated, the queue decouples the two in turn.
rlexp.train.off_policy runs it; docs/algorithms.md says why each refused combination is refused.

Pure Python: the checks and the estimates import it before JAX.
"""

from __future__ import annotations

from rlexp.config.schema import RlexpConfig, TrainerConfig
from rlexp.errors import ConfigError

KEY = "trainer.off_policy.max_staleness"


def staleness(t: TrainerConfig) -> int:
    return int(t.off_policy.max_staleness)


def enabled(t: TrainerConfig) -> bool:
    return staleness(t) > 0


def concurrent(cfg: RlexpConfig) -> bool:
    """Whether a thread samples while the trainer updates: rollout devices apart from the trainer's."""
    return enabled(cfg.trainer) and bool(cfg.slice.rollout_devices)


def version_of(step: int, k: int, start: int = 0) -> int:
    """The policy version (steps trained) whose weights sample the batch of `step`: max(start, step - 1 - k), where
    `start` is the step a run resumed from (its queue holds the batches sampled before)."""
    return max(start, step - 1 - k)


def check_keys(t: TrainerConfig) -> None:
    """The key's own value, and what the learner cannot do with batches sampled ahead (registry.check_keys)."""
    k = t.off_policy.max_staleness
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ConfigError(KEY, k, "use an integer >= 0 (0: on-policy; k: rollouts up to k steps behind)")
    if not k:
        return
    if t.num_iterations > 1:
        raise ConfigError(
            KEY,
            k,
            f"with trainer.num_iterations={t.num_iterations} Tunix takes pi_old from the rollout copy at sampling "
            "time, not from the weights the update starts from; use trainer.num_iterations=1 with it",
        )
    ds, corrects = t.dapo.dynamic_sampling.enabled, t.correction.mode != "none"
    if ds and corrects:
        raise ConfigError(
            KEY,
            k,
            "DAPO's dynamic sampling corrects each sampling round as it samples, so its weights could not be "
            "computed when the batch is trained; set trainer.dapo.dynamic_sampling.enabled=false or "
            "trainer.correction.mode=none",
        )


def check(cfg: RlexpConfig, needs_critic: bool) -> None:
    """Rules across groups (registry.check_algorithm): the critic, episodes, the engine, the processes."""
    t, s = cfg.trainer, cfg.slice
    if not enabled(t):
        return
    k = staleness(t)
    if needs_critic:
        raise ConfigError(
            KEY,
            k,
            f"{t.algorithm}'s critic values each batch while it samples, with weights the update is changing; "
            "use 0, or a critic-free algorithm (grpo, dapo, drgrpo, gspo, opd)",
        )
    if cfg.agent.kind == "tools":
        raise ConfigError(KEY, k, "agent=tools' episodes sample turn by turn in the learner's own thread; use 0")
    if t.rollout.engine != "vanilla":
        raise ConfigError(
            KEY, k, f"the {t.rollout.engine} engine's weights are not staged here yet; use engine=vanilla, or 0"
        )
    if s.nodes * s.processes_per_node > 1:
        raise ConfigError(
            KEY,
            k,
            "a run of several JAX processes would sample ahead with collectives in another order on each; use 0",
        )


def queue_bytes(cfg: RlexpConfig, reference: bool) -> int:
    """Bytes of the k batches queued ahead: token ids (int32) and masks of prompts and completions, the reference's
    (`reference`: the algorithm scores with one) and the sampler's per-token log-probabilities (f32, when used) and
    each sequence's advantage."""
    t = cfg.trainer
    if not enabled(t):
        return 0
    sequences = t.batch_size * t.num_generations
    logps = (1 if reference else 0) + (1 if t.correction.mode != "none" else 0)
    per_sequence = 5 * t.max_prompt_tokens + (5 + 4 * logps) * t.max_completion_tokens + 4
    return staleness(t) * sequences * per_sequence
