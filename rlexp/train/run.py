"""Entry of one training job: prepare JAX, run a TrainingSession, return the sweep objective."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError
from rlexp.train import rundir


class _NotOnThisHost(logging.Filter):
    """Tunix warns once per non-TPU device; on a CPU or GPU host that is expected, not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Skipping non-TPU device" not in record.getMessage()


def setup_jax(conf: RlexpConfig) -> None:
    """Host devices and the persistent compilation cache; must run before JAX is first used."""
    processes = conf.slice.nodes * conf.slice.processes_per_node
    local_devices = conf.slice.devices // processes  # cpu-2x1: one CPU device in each of 2 processes
    if conf.slice.kind == "cpu" and local_devices > 1:
        flag = f"--xla_force_host_platform_device_count={local_devices}"
        if flag not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    import jax

    if processes > 1 and not jax.distributed.is_initialized():
        raise ConfigError(
            "slice",
            conf.slice.name,
            f"runs as {processes} JAX processes that a launcher starts together: "
            f"python -m rlexp -m hydra/launcher=slurm slice={conf.slice.name} ... "
            "(scripts/local_slurm.sh up starts a Slurm on this machine)",
        )
    from absl import logging as absl_logging

    # Tunix and orbax log every checkpoint and compile step at INFO through absl; keep the
    # console for rlexp's progress bar and summary (warnings and errors still show).
    absl_logging.set_verbosity(absl_logging.WARNING)
    logging.getLogger("absl").setLevel(logging.WARNING)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'"
    absl_logger = logging.getLogger("absl")
    if not any(isinstance(f, _NotOnThisHost) for f in absl_logger.filters):
        absl_logger.addFilter(_NotOnThisHost())
    jax.config.update("jax_enable_compilation_cache", conf.compile_cache.enabled)
    if conf.compile_cache.enabled:
        cache = Path(conf.compile_cache.dir).expanduser()
        cache.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def train(conf: RlexpConfig, cfg: DictConfig, run_dir: Path | str) -> float:
    """Train one job end to end and return its objective (`objective=`, a summary.json key)."""
    setup_jax(conf)
    from rlexp.train.session import TrainingSession

    summary = TrainingSession(conf, cfg, str(conf.output_dir or run_dir)).execute()
    value = rundir.dotted_get(summary, conf.objective)
    if not isinstance(value, int | float):
        raise ConfigError("objective", conf.objective, "name a numeric key of summary.json, e.g. eval.after.pass_at_1")
    return float(value)
