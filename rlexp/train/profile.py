"""`profile.steps=N`: a JAX profiler trace of N training steps, through Tunix's own trainer profiler.

Tunix's `PeftTrainer` starts `jax.profiler` once `skip_steps` updates are done and stops it after N more, so
the trace holds N updates, each with the rollout before it, on process 0 only. Its profiler counts micro-batch
iterations, not steps (scaled here under gradient accumulation), from the step the trainer restored. It is
built in the trainer's constructor, where a resumed run with fewer steps left than `skip_steps` would make it
raise; rlexp therefore gives the trainer its profiler once the restored step is known (`install_profiler`).
The trace (`plugins/profile/<time>/<host>.xplane.pb`, with a `.trace.json.gz`) opens in XProf or
TensorBoard's profile tab.
"""

from __future__ import annotations

import logging
from typing import Any

from rlexp import storage
from rlexp.config.schema import RlexpConfig
from rlexp.tunix.trainer import stop_open_trace

__all__ = ["install_profiler", "profile_dir", "stop_open_trace"]

log = logging.getLogger(__name__)


def profile_dir(conf: RlexpConfig, run_dir: str) -> str | None:
    """Where the trace goes; None when `profile.steps` is 0."""
    if not conf.profile.steps:
        return None
    return conf.profile.dir or storage.join(run_dir, "profile")


def _iterations_per_step(conf: RlexpConfig) -> int:
    t = conf.trainer
    return t.batch_size // t.micro_batch_size if t.micro_batch_size else 1


def install_profiler(trainer: Any, conf: RlexpConfig, run_dir: str) -> str | None:
    """Give Tunix's actor trainer (built, checkpoint restored) the profiler `profile` asks for; the trace's
    folder, or None when no trace will be taken."""
    import jax

    log_dir = profile_dir(conf, run_dir)
    if log_dir is None or jax.process_index() != 0:  # Tunix traces on process 0 only
        return None
    left = conf.trainer.max_steps - trainer.train_steps
    if conf.profile.skip_steps >= left:
        log.warning(
            "profile.skip_steps=%d: %d steps left after resuming at step %d; no trace taken",
            conf.profile.skip_steps,
            left,
            trainer.train_steps,
        )
        return None
    from tunix.sft.profiler import ProfilerOptions

    from rlexp.tunix.trainer import give_profiler

    per_step = _iterations_per_step(conf)
    options = ProfilerOptions(
        log_dir=log_dir,
        skip_first_n_steps=conf.profile.skip_steps * per_step,
        profiler_steps=conf.profile.steps * per_step,
    )
    give_profiler(trainer, options, conf.trainer.max_steps * per_step)
    return log_dir
