"""Checks a composed config before anything heavy runs (no JAX import here).

Every rule raises `ConfigError(key, value, fix)`, which the entry point prints as one line. These are the config
layer's own rules; the model family's rules (`rlexp.families.rules`) and the memory fit (`rlexp.estimates.memory`)
sit above it and run after these in `rlexp.checks.check_config`. Rules that need data or weights (row counts of real datasets, checkpoint shapes) run later,
when those are loaded, and raise the same error type.
"""

from __future__ import annotations

import math
import re

from rlexp.config.agent_rules import check_agent
from rlexp.config.derived import resolve_mesh
from rlexp.config.schema import RlexpConfig, RolloutConfig, TrainerConfig
from rlexp.config.values import check_values, eval_k_refusal, eval_ks
from rlexp.errors import ConfigError

LOSS_AGG_MODES = (
    "token-mean",
    "sequence-mean-token-mean",
    "sequence-mean-token-scale",
    "seq-mean-token-sum",
    "sequence-mean-token-sum-norm",
)
DTYPES = ("float32", "bfloat16", "float16")
EVAL_STRATEGIES = ("greedy", "standard", "liberal")
COMBINES = ("sum", "weighted_mean", "weighted_mean_clipped")  # the last: weighted_mean's older name


def _choice(key: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(key, value, f"use one of {', '.join(map(str, allowed))}")


def _positive(key: str, value: float, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not ok or (isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError(key, value, "must be " + (">= 0" if allow_zero else "> 0"))


def steps_available(cfg: RlexpConfig, train_rows: int) -> int:
    """Optimizer-update steps the train split supports at the configured batch and epochs (each epoch drops
    its last partial batch, as the trainer's batching does)."""
    return cfg.trainer.epochs * (train_rows // cfg.trainer.batch_size)


def _check_trainer(t: TrainerConfig) -> None:
    _choice("trainer.loss_agg_mode", t.loss_agg_mode, LOSS_AGG_MODES)
    _choice("trainer.lr_schedule", t.lr_schedule, ("cosine", "constant"))
    _choice("trainer.resume", t.resume, ("auto", "never"))
    for key in ("max_steps", "epochs", "batch_size", "num_iterations", "learning_rate", "temperature"):
        _positive(f"trainer.{key}", getattr(t, key))
    for key in ("max_prompt_tokens", "max_completion_tokens", "eval_every", "eval_prompts"):
        _positive(f"trainer.{key}", getattr(t, key))
    for key in ("eval_samples", "samples_every", "checkpoint_every", "keep_checkpoints"):
        _positive(f"trainer.{key}", getattr(t, key))
    for key in ("weight_decay", "grad_clip", "final_lr_ratio"):
        _positive(f"trainer.{key}", getattr(t, key), allow_zero=True)
    if not 0 <= t.warmup_ratio < 1:
        raise ConfigError("trainer.warmup_ratio", t.warmup_ratio, "use a fraction in [0, 1)")
    if not 0 < t.epsilon < 1:
        raise ConfigError("trainer.epsilon", t.epsilon, "use a clip range in (0, 1), e.g. 0.2")
    if not 0 < t.top_p <= 1:
        raise ConfigError("trainer.top_p", t.top_p, "use a probability in (0, 1]")
    if t.top_k is not None and t.top_k < 1:
        raise ConfigError("trainer.top_k", t.top_k, "use null (no top-k) or an integer >= 1")
    _check_eval(t)
    if t.checkpoint_every % t.eval_every:
        raise ConfigError(
            "trainer.checkpoint_every",
            t.checkpoint_every,
            f"must be a multiple of trainer.eval_every={t.eval_every} so every checkpoint has an eval",
        )
    if t.lora.rank < 0:
        raise ConfigError("trainer.lora.rank", t.lora.rank, "use 0 (full fine-tuning) or a positive rank")


def _check_sampling(key: str, temperature: float | None, top_p: float | None, top_k: int | None) -> None:
    if temperature is not None:
        _positive(f"{key}temperature", temperature)
    if top_p is not None and not 0 < top_p <= 1:
        raise ConfigError(f"{key}top_p", top_p, "use a probability in (0, 1]")
    if top_k is not None and top_k < 1:
        raise ConfigError(f"{key}top_k", top_k, "use null (no top-k) or an integer >= 1")


def _check_eval(t: TrainerConfig) -> None:
    _choice("trainer.eval_strategy", t.eval_strategy, EVAL_STRATEGIES)
    _choice("trainer.eval_mode", t.eval_mode, ("pass", "maj", "pass_at_1"))
    _positive("trainer.eval_passes", t.eval_passes)
    for name in EVAL_STRATEGIES:
        s = getattr(t.eval_strategies, name)
        _check_sampling(f"trainer.eval_strategies.{name}.", s.temperature, s.top_p, s.top_k)
    _check_sampling("trainer.eval_", t.eval_temperature, t.eval_top_p, t.eval_top_k)
    reason = eval_k_refusal(t.eval_k)  # its type (check_values asks first), then its range
    if reason is None and any(not 1 <= k <= t.eval_samples for k in eval_ks(t.eval_k, t.eval_samples)):
        reason = f"use k values in [1, trainer.eval_samples={t.eval_samples}], or null for each power of two up to it"
    if reason is not None:
        shown = t.eval_k if isinstance(t.eval_k, int | None) else list(t.eval_k)
        raise ConfigError("trainer.eval_k", shown, reason)


def validate(cfg: RlexpConfig) -> None:
    """Raise ConfigError on the first broken rule of the config layer (`rlexp.checks.check_config` runs them all,
    the model family's and the memory fit included)."""
    check_values(cfg)  # finite numbers, known words, ranges of single keys (rlexp.config.values)
    return check_rules(cfg)


def check_rules(cfg: RlexpConfig) -> None:
    """`validate` after `check_values` passed (a run's plan checks the values before it decides where the job
    runs): the config layer's rules across keys."""
    t, m, s = cfg.trainer, cfg.model, cfg.slice
    _check_trainer(t)
    _choice("model.dtype", m.dtype, DTYPES)
    _choice("model.param_dtype", m.param_dtype, DTYPES)
    _choice("model.remat", m.remat, ("none", "full"))
    _choice("slice.kind", s.kind, ("cpu", "gpu", "tpu"))
    _positive("slice.devices", s.devices)
    if not 0 <= s.rollout_devices < s.devices:
        raise ConfigError("slice.rollout_devices", s.rollout_devices, f"use 0 (colocated) or fewer than {s.devices}")
    fsdp, _tp = resolve_mesh(s)
    _check_rollout(cfg)
    for key in ("micro_batch_size", "rollout_micro_batch_size"):
        micro = getattr(t, key)
        if micro is not None and (micro < 1 or t.batch_size % micro):
            raise ConfigError(f"trainer.{key}", micro, f"must divide trainer.batch_size={t.batch_size} (or be null)")
    if t.micro_batch_size and (t.micro_batch_size * t.num_generations) % fsdp:
        raise ConfigError(
            "trainer.micro_batch_size",
            t.micro_batch_size,
            f"micro_batch_size x num_generations = {t.micro_batch_size * t.num_generations} must be divisible by "
            f"the data-parallel size {fsdp} of slice {s.name}",
        )
    rollouts = t.batch_size * t.num_generations
    if rollouts % fsdp:
        raise ConfigError(
            "trainer.batch_size",
            t.batch_size,
            f"batch_size x num_generations = {rollouts} must be divisible by the data-parallel size "
            f"{fsdp} of slice {s.name}",
        )
    total = t.max_prompt_tokens + t.max_completion_tokens
    if total > m.max_context:
        raise ConfigError(
            "trainer.max_completion_tokens",
            t.max_completion_tokens,
            f"max_prompt_tokens + max_completion_tokens = {total} exceeds model {m.name}'s "
            f"context of {m.max_context}; lower one of them",
        )
    if cfg.dataset.loader in ("jsonl", "parquet") and not cfg.dataset.source:
        raise ConfigError(
            "dataset.source", None, f"set the {cfg.dataset.loader} file or folder to read (a path or gs://)"
        )
    if cfg.dataset.shuffle == "maxtext" and cfg.dataset.loader == "arith":
        raise ConfigError("dataset.shuffle", "maxtext", "MaxText's selection is for file and hub datasets; use rlexp")
    if cfg.dataset.train_size > 0:  # datasets of unknown size are checked after loading
        check_steps(cfg, cfg.dataset.train_size)
    if t.eval_prompts > cfg.dataset.eval_size > 0:
        raise ConfigError("trainer.eval_prompts", t.eval_prompts, f"the eval split has {cfg.dataset.eval_size} rows")
    _check_reward(cfg)
    check_agent(cfg)  # turns, budgets, the tool-call format the chat template carries
    _check_profile(cfg)
    _choice("logger.name", cfg.logger.name, ("none", "wandb", "tensorboard"))


def _check_rollout(cfg: RlexpConfig) -> None:
    """trainer.rollout: the engine fits the slice, vLLM's split fits the rollout devices, async has its own devices."""
    r, s = cfg.trainer.rollout, cfg.slice
    _choice("trainer.rollout.engine", r.engine, ("vanilla", "vllm"))
    if r.engine == "vllm" and s.kind != "tpu":
        raise ConfigError(
            "trainer.rollout.engine", r.engine, f"vLLM rollout runs on TPU slices (vllm-tpu); use vanilla on {s.kind}"
        )
    if r.async_rollout and not s.rollout_devices:
        raise ConfigError(
            "trainer.rollout.async_rollout",
            r.async_rollout,
            "async rollout samples on devices of its own: set slice.rollout_devices > 0 (e.g. half the devices)",
        )
    if not 0 < r.hbm_utilization <= 1:
        raise ConfigError("trainer.rollout.hbm_utilization", r.hbm_utilization, "use a fraction in (0, 1]")
    for key in ("data_parallel", "tensor_parallel"):
        if getattr(r, key) == 0 or getattr(r, key) < -1:
            raise ConfigError(f"trainer.rollout.{key}", getattr(r, key), "use -1 (derived) or a positive size")
    _check_vllm_knobs(r)
    if r.engine != "vllm":
        return
    n = s.rollout_devices or s.devices  # colocated: vLLM shares every device with the trainer
    dp, tp, ep = r.data_parallel, r.tensor_parallel, r.expert_parallel
    if dp > 0 and tp > 0 and dp * tp * ep != n:
        raise ConfigError(
            "trainer.rollout.data_parallel",
            dp,
            f"data_parallel x tensor_parallel x expert_parallel = {dp * tp * ep} must equal the {n} rollout devices",
        )
    for key, size in (("data_parallel", dp), ("tensor_parallel", tp), ("expert_parallel", ep)):
        if size > 0 and n % size:
            raise ConfigError(f"trainer.rollout.{key}", size, f"must divide the {n} rollout devices")
    experts = int(cfg.model.extra.get("num_experts", 0) or 0)
    if ep > 1 and (not experts or experts % ep):
        raise ConfigError(
            "trainer.rollout.expert_parallel", ep, f"must divide the model's experts ({experts or 'none'}); use 1"
        )


def _check_vllm_knobs(r: RolloutConfig) -> None:
    """trainer.rollout's vLLM sizes: positive where set; env names and values are plain strings."""
    if r.expert_parallel < 1:
        raise ConfigError("trainer.rollout.expert_parallel", r.expert_parallel, "use a positive size (1: none)")
    for key in ("max_num_seqs", "max_num_batched_tokens", "reshard_chunk_size"):
        value = getattr(r, key)
        if value is not None and value < 1:
            raise ConfigError(f"trainer.rollout.{key}", value, "use a positive number, or null for vLLM's default")
    if r.kv_cache_buffer < 0:
        raise ConfigError("trainer.rollout.kv_cache_buffer", r.kv_cache_buffer, "use tokens >= 0")
    for name in r.env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise ConfigError(f"trainer.rollout.env.{name}", r.env[name], "use an environment variable name")


def _check_profile(cfg: RlexpConfig) -> None:
    """profile: a trace that starts within the run (Tunix's profiler raises only once the trainer is built)."""
    p = cfg.profile
    _positive("profile.steps", p.steps, allow_zero=True)
    _positive("profile.skip_steps", p.skip_steps, allow_zero=True)
    if p.steps and p.skip_steps >= cfg.trainer.max_steps:
        raise ConfigError(
            "profile.skip_steps",
            p.skip_steps,
            f"the trace would start after the run's last step (trainer.max_steps={cfg.trainer.max_steps}); "
            "lower it, or set profile.steps=0",
        )


def check_steps(cfg: RlexpConfig, train_rows: int) -> None:
    """max_steps must fit in the data; the message says how many steps the data gives."""
    t = cfg.trainer
    available = steps_available(cfg, train_rows)
    if t.max_steps > available:
        raise ConfigError(
            "trainer.max_steps",
            t.max_steps,
            f"the train split ({train_rows} rows x {t.epochs} epochs / batch {t.batch_size}) gives only "
            f"{available} steps; lower max_steps or raise trainer.epochs",
        )


def _check_reward(cfg: RlexpConfig) -> None:
    r = cfg.reward
    if not r.functions:
        raise ConfigError("reward.functions", [], "list at least one reward function")
    _choice("reward.combine", r.combine, COMBINES)
    if not 0 <= r.max_error_ratio <= 1:
        raise ConfigError("reward.max_error_ratio", r.max_error_ratio, "use a fraction in [0, 1]")
    for i, f in enumerate(r.functions):
        if not math.isfinite(f.weight):
            raise ConfigError(f"reward.functions[{i}].weight", f.weight, "use a finite number")
