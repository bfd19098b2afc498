"""Build Tunix objects from rlexp config: mesh, optimizer, rollout config, RLCluster, learner.

Nothing here re-implements Tunix: it only translates the trainer / slice / model groups into
Tunix's Python API (RLCluster, GRPOLearner, DAPOLearner, DrGRPOLearner, PPOLearner).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType

from rlexp.config.derived import resolve_mesh, trainer_devices
from rlexp.config.schema import RlexpConfig
from rlexp.train.optimizer import build_optimizer
from rlexp.tunix.sampler import lean_rollout_engine, uses_lean_sampler


def build_meshes(cfg: RlexpConfig) -> tuple[jax.sharding.Mesh, jax.sharding.Mesh]:
    """(trainer mesh, rollout mesh); the same mesh when rollout is colocated.

    Axis types are Auto: jax 0.10 defaults to Explicit, which breaks Tunix's embedding gather.
    """
    fsdp, tp = resolve_mesh(cfg.slice)
    devices = jax.devices()
    if len(devices) < cfg.slice.devices:
        from rlexp.errors import ConfigError

        raise ConfigError(
            "slice.devices", cfg.slice.devices, f"this host has {len(devices)} JAX devices; pick a matching slice"
        )
    n_train = trainer_devices(cfg.slice)
    auto = (AxisType.Auto, AxisType.Auto)
    train = jax.sharding.Mesh(np.array(devices[:n_train]).reshape(fsdp, tp), ("fsdp", "tp"), axis_types=auto)
    if not cfg.slice.rollout_devices:
        return train, train
    rollout_devs = np.array(devices[n_train : cfg.slice.devices]).reshape(cfg.slice.rollout_devices, 1)
    return train, jax.sharding.Mesh(rollout_devs, ("fsdp", "tp"), axis_types=auto)


def rollout_config(cfg: RlexpConfig, tokenizer: Any, prompt_tokens: int | None = None) -> Any:
    """Tunix's rollout settings; `prompt_tokens` (see prompt_width) defaults to trainer.max_prompt_tokens."""
    import jax.numpy as jnp
    from tunix.rl.rollout.base_rollout import RolloutConfig

    t = cfg.trainer
    width = prompt_tokens or t.max_prompt_tokens
    # agent=tools: a later turn's prompt holds the episode so far (in buckets of 16) and samples a whole turn
    turn = (cfg.agent.max_turn_tokens or t.max_completion_tokens) + 16 if cfg.agent.kind == "tools" else 0
    return RolloutConfig(
        max_tokens_to_generate=t.max_completion_tokens,
        max_prompt_length=width,
        kv_cache_size=width + t.max_completion_tokens + t.rollout.kv_cache_buffer + turn,
        temperature=t.temperature,
        top_p=t.top_p,
        # a top-k beyond the vocabulary keeps every token, which XLA's top_k refuses to be asked for
        top_k=min(t.top_k, cfg.model.vocab_size) if t.top_k else None,
        eos_tokens=[tokenizer.eos_token_id],
        # the sampled tokens' log-probabilities, for trainer.correction (rlexp.algorithms.correction)
        return_logprobs=t.correction.mode != "none",
        # the rollout copy's weights (rollout devices of its own; Tunix casts at load and at each sync)
        data_type=getattr(jnp, t.rollout.dtype) if t.rollout.dtype else None,
        **(vllm_rollout_fields(cfg) if cfg.trainer.rollout.engine == "vllm" else {}),
    )


def vllm_rollout_fields(cfg: RlexpConfig) -> dict[str, Any]:
    """The RolloutConfig fields that point Tunix's vLLM engine (engine="vllm") at the model and split it.

    vLLM starts from random weights and receives the actor's at the first weight sync, so it only needs the
    checkpoint's config (its folder or hub id). -1 sizes are left to vLLM/Tunix to derive from the rollout mesh.
    """
    r = cfg.trainer.rollout
    return {
        "rollout_vllm_model_version": cfg.model.path or cfg.model.hf_id,
        "rollout_vllm_hbm_utilization": r.hbm_utilization,
        "data_parallel_size": r.data_parallel,
        "tensor_parallel_size": r.tensor_parallel,
        "expert_parallel_size": r.expert_parallel,
        "rollout_vllm_init_with_random_weights": True,
        "rollout_vllm_async_scheduling": r.async_scheduling,
        "rollout_vllm_enable_dp_attention": r.enable_dp_attention,
        "rollout_vllm_max_num_seqs": r.max_num_seqs,
        "rollout_vllm_max_num_batched_tokens": r.max_num_batched_tokens,
        "rollout_vllm_reshard_chunk_size": r.reshard_chunk_size,
        # MaxText passes enable_expert_parallel to the engine whenever experts are split over rollout devices
        "rollout_vllm_kwargs": {"enable_expert_parallel": True} if r.expert_parallel > 1 else {},
    }


def apply_rollout_env(cfg: RlexpConfig) -> dict[str, str]:
    """trainer.rollout.env in this process, before the engine is imported; a variable already set (a pod's
    container env carries the same values) is kept. Returns what was set here."""
    import os

    added = {k: str(v) for k, v in cfg.trainer.rollout.env.items() if k not in os.environ}
    os.environ.update(added)
    return added


def rollout_engine(cfg: RlexpConfig, colocated: bool) -> Any:
    """Tunix's `ClusterConfig.rollout_engine` for trainer.rollout.engine.

    A custom engine gets the actor's own model, so only a colocated rollout (shared weights) uses the lean one,
    and only when `perf.patches` names `lean_sampler`: otherwise Tunix's own vanilla rollout and `Sampler`.
    """
    if cfg.trainer.rollout.engine == "vllm":
        return "vllm"
    return lean_rollout_engine() if colocated and uses_lean_sampler(cfg) else "vanilla"


def build_cluster(
    cfg: RlexpConfig,
    actor: Any,
    reference: Any,
    tokenizer: Any,
    meshes,
    collector,
    run_dir: str,
    prompt_tokens: int | None = None,
    critic: Any = None,
) -> Any:
    import orbax.checkpoint as ocp
    from tunix.rl import rl_cluster as rl
    from tunix.sft.metrics_logger import MetricsLoggerOptions

    from rlexp.tunix.sampler import recording_cluster_class
    from rlexp.tunix.trainer import without_progress_bar

    t = cfg.trainer
    train_mesh, rollout_mesh = meshes
    role_to_mesh = {rl.Role.ACTOR: train_mesh, rl.Role.REFERENCE: train_mesh, rl.Role.ROLLOUT: rollout_mesh}
    critic_optimizer = None
    if critic is not None:  # an algorithm with a critic (trainer=ppo): the critic trains on the actor's devices
        from rlexp.algorithms.registry import algorithm_of

        role_to_mesh[rl.Role.CRITIC] = train_mesh
        critic_optimizer = build_optimizer(algorithm_of(t).critic_trainer(t))
    training = rl.RLTrainingConfig(
        actor_optimizer=build_optimizer(t),
        critic_optimizer=critic_optimizer,
        # one optimizer update per step; micro-batches accumulate gradients within it
        mini_batch_size=t.batch_size if t.micro_batch_size else None,
        train_micro_batch_size=t.micro_batch_size,
        rollout_micro_batch_size=t.rollout_micro_batch_size,
        compute_logps_micro_batch_size=t.micro_batch_size,
        # Tunix counts optimizer updates (num_iterations per rlexp step, one rollout): rlexp.train.hooks
        eval_every_n_steps=t.eval_every * t.num_iterations,  # Tunix's own eval needs an eval_ds: none is passed
        max_steps=t.max_steps * t.num_iterations,
        checkpoint_root_directory=f"{run_dir.rstrip('/')}/checkpoints",
        checkpointing_options=ocp.CheckpointManagerOptions(
            max_to_keep=t.keep_checkpoints,
            # every checkpoint_every steps (and on preemption); orbax's default would also save step 1
            save_decision_policy=ocp.checkpoint_managers.AnySavePolicy(
                [
                    ocp.checkpoint_managers.FixedIntervalPolicy(t.checkpoint_every * t.num_iterations),
                    ocp.checkpoint_managers.PreemptionCheckpointingPolicy(),
                ]
            ),
        ),
        # custom_backend replaces Tunix's default TensorBoard/W&B backends with rlexp's collector.
        metrics_logging_options=MetricsLoggerOptions(
            log_dir=f"{run_dir.rstrip('/')}/tunix",
            flush_every_n_steps=1,
            backend_kwargs={"custom_backend": [lambda: collector]},
        ),
    )
    apply_rollout_env(cfg)
    cluster_config = rl.ClusterConfig(
        role_to_mesh=role_to_mesh,
        rollout_engine=rollout_engine(cfg, colocated=rollout_mesh is train_mesh),
        offload_to_cpu=False,
        training_config=training,
        rollout_config=rollout_config(cfg, tokenizer, prompt_tokens),
    )
    # Tunix's own span timings give perf/{mean,sum}/rollout_time (rlexp: perf/rollout_time_sec). Its export reads a
    # step's rollout from the step's own thread: a rollout thread sampling ahead (rlexp.train.off_policy) times its
    # batches itself instead.
    from tunix.perf.export import PerfMetricsExport
    from tunix.perf.metrics import PerfMetricsConfig

    from rlexp.algorithms.off_policy import concurrent

    perf = PerfMetricsConfig(custom_export_fn=_quiet(PerfMetricsExport.from_cluster_config(cluster_config)))
    perf = None if concurrent(cfg) else perf
    cluster = recording_cluster_class()(
        actor=actor,
        critic=critic,
        reference=reference,
        tokenizer=tokenizer,
        cluster_config=cluster_config,
        perf_config=perf,
    )
    without_progress_bar(cluster.actor_trainer)  # the console's progress is rlexp's (session.progress)
    if critic is not None:
        without_progress_bar(cluster.critic_trainer)
    return cluster


def _quiet(export: Any) -> Any:
    """Tunix's perf export, without numpy's warnings over the spans a run has none of: with no reference model
    (beta=0, DAPO) it averages an empty list of reference-inference times, a metric rlexp drops anyway."""
    import warnings

    def quiet(query: Any) -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "(Mean of empty slice|invalid value encountered)", RuntimeWarning)
            return export(query)

    return quiet


def build_learner(cfg: RlexpConfig, cluster: Any, reward_fns: list, metric_fns: list, refill: Any = None) -> Any:
    """Tunix's learner for trainer.algorithm, with trainer.rollout.async_rollout applied; `refill` (a callable
    returning the next batch of prompts) feeds dynamic sampling (rlexp.algorithms.dapo). The algorithm's spec
    builds it (rlexp.algorithms)."""
    from rlexp.algorithms import correction, off_policy
    from rlexp.algorithms.registry import LearnerInputs, algorithm_of
    from rlexp.train.metrics import rlexp_metric_key

    inputs = LearnerInputs(cfg, cluster, list(reward_fns), list(metric_fns), refill, rlexp_metric_key)
    learner = algorithm_of(cfg.trainer).build_learner(inputs)
    if off_policy.enabled(cfg.trainer):
        # batches sampled ahead, handed over when their step trains: before the correction, which weighs each batch
        # against the weights that train on it (rlexp.tunix.ahead; the queue is the session's, rlexp.train.off_policy)
        from rlexp.tunix.ahead import Ahead

        Ahead(learner).hand_over()
    if correction.enabled(cfg.trainer):  # after the algorithm's own rewrites (OPD's advantages)
        correction.learner_correction(learner, cfg, rlexp_metric_key)
    set_async_rollout(cfg, learner)
    return learner


def set_async_rollout(cfg: RlexpConfig, learner: Any) -> None:
    """Apply trainer.rollout.async_rollout to a built learner.

    Tunix 0.1.7 queues each rollout micro-batch for the actor as soon as it is sampled (the actor trains on it
    while the next one samples) whenever the actor and rollout meshes differ, and decides it once in the learner's
    constructor. Weights sync once per global step either way, so both modes are on-policy: on the default task,
    100 steps on 2+2 CPU devices gave identical metrics with and without it. rlexp makes the overlap explicit.
    """
    learner.can_enable_async_rollout = bool(learner.can_enable_async_rollout and cfg.trainer.rollout.async_rollout)
