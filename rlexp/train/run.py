"""Entry of one planned training job (rlexp.train.plan): prepare JAX, run a TrainingSession, return the sweep
objective."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from omegaconf import DictConfig

from rlexp import perf
from rlexp.config.schema import RlexpConfig
from rlexp.errors import ConfigError, RunError, print_error
from rlexp.estimates.memory import estimate_memory
from rlexp.perf.malloc import LARGE_BUFFER, reuse_freed_memory
from rlexp.train import distributed, heap, rundir

if TYPE_CHECKING:
    from rlexp.train.graceful_stop import GracefulStop
    from rlexp.train.plan import RunPlan


POD_STOPPED_EXIT = 128 + 15  # SIGTERM's exit status


class _NotOnThisHost(logging.Filter):
    """Tunix warns once per non-TPU device; on a CPU or GPU host that is expected, not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Skipping non-TPU device" not in record.getMessage()


def leave_for_requeue(err: RunError, stop: GracefulStop) -> NoReturn:
    """End a Slurm job that a signal stopped (checkpoint saved) without a result for the submitting side.

    `scontrol requeue`, preemption and `scancel` all send SIGTERM first. The submitting side waits on the job
    while Slurm has it (a requeued job runs again and resumes from the checkpoint) and reads a job that ended
    without a result as failed; a result written now would end the wait before the requeued run completed.
    Submitit's time-limit warning requeues the job from here, once the checkpoint is on disk.
    """
    import jax

    print_error(err)
    time_limit = submitit_time_limit_signal()
    if time_limit in (stop.requested, stop.late) and jax.process_index() == 0:
        handle = distributed.slurm_job_handle()
        done = subprocess.run(["scontrol", "requeue", handle], capture_output=True, text=True, check=False)
        # printed like the error line above it, not logged: the two lines say how the job ended, whatever -q says
        print(
            f"rlexp: requeued Slurm job {handle} before its time limit{'' if done.returncode == 0 else ': ' + done.stderr.strip()}",
            file=sys.stderr,
        )
    sys.stderr.flush()
    # Not an Exception: Hydra and submitit let it through, writing no result. Status 0: Slurm decides the job's
    # state (requeued, cancelled) either way, and srun --kill-on-bad-exit must not kill task 0 while it writes
    # the run's summary because another task finished first.
    raise SystemExit(0)


def submitit_time_limit_signal() -> str:
    """The signal submitit asks Slurm to send before the time limit (`--signal=USR2@120` by default)."""
    return "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")


def add_xla_flag(name: str, value: object) -> None:
    """Append `name=value` to XLA_FLAGS unless XLA_FLAGS already sets `name` (the user's value wins)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if not any(f.split("=", 1)[0] == name for f in flags.split()):
        os.environ["XLA_FLAGS"] = f"{flags} {name}={value}".strip()


def setup_jax(conf: RlexpConfig, memory: dict[str, Any] | None = None) -> None:
    """Host devices, the persistent compilation cache and the perf patches; must run before JAX is first used.
    `memory`: the run plan's estimate (rlexp.train.plan), made here when None."""
    processes = conf.slice.nodes * conf.slice.processes_per_node
    local_devices = conf.slice.devices // processes  # cpu-2x1: one CPU device in each of 2 processes
    if conf.slice.kind == "cpu" and local_devices > 1:
        add_xla_flag("--xla_force_host_platform_device_count", local_devices)
    patches = list(conf.perf.patches)
    large = conf.slice.kind == "cpu" and (memory or estimate_memory(conf))["activations"] >= LARGE_BUFFER
    if "malloc" in patches and large and reuse_freed_memory():  # before XLA:CPU starts its threads
        perf.applied_malloc()
    import jax

    if processes > 1 and not jax.distributed.is_initialized():
        raise ConfigError(
            "slice",
            conf.slice.name,
            f"runs as {processes} JAX processes that a launcher starts together: "
            f"python -m rlexp -m hydra/launcher=slurm slice={conf.slice.name} ... , or inside a Slurm allocation "
            f"srun -n {processes} python -m rlexp slice={conf.slice.name} ... "
            "(scripts/local_slurm.sh up starts a Slurm on this machine)",
        )
    if jax.distributed.is_initialized() and jax.process_count() != processes:
        raise ConfigError(
            "slice",
            conf.slice.name,
            f"runs as {processes} JAX processes, but this job started {jax.process_count()}; "
            f"start {processes} tasks (srun -n {processes}, or hydra/launcher=slurm, which sizes the job from the slice)",
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
        if jax.process_count() > 1:
            from rlexp.fixes.jax_cache_keys import share_compiled_programs, share_cpu_cache_keys

            # processes other than 0 hit the entries process 0 writes, and on one host take the binaries it compiles
            if share_cpu_cache_keys():
                share_compiled_programs(cache)
    perf.apply(patches)  # rlexp.perf: the speed work on Tunix's code paths, each patch guarded


def train(plan: RunPlan, conf: RlexpConfig, cfg: DictConfig) -> float:
    """Train one planned job end to end (rlexp.train.plan made every check and decision) and return its
    objective (`objective=`, a summary.json key)."""
    assert plan.action == "train", plan.action  # a submitted or completed job is not trained here (rlexp.main)
    collecting = heap.pause()  # the session resumes collection when its set-up is done (rlexp.train.heap)
    stop: GracefulStop | None = None  # SIGTERM / Ctrl-C while training, once JAX is set up
    try:
        setup_jax(conf, plan.memory)
        import jax

        from rlexp.train.graceful_stop import GracefulStop
        from rlexp.train.session import TrainingSession

        stop = GracefulStop(run_dir=plan.run_dir if jax.process_index() == 0 else None)
        summary = TrainingSession(plan, conf, cfg, stop).execute(collecting)
    except RunError as err:
        if stop is not None and stop.stopped and distributed.in_submitit_slurm_job():
            leave_for_requeue(err, stop)
        if stop is not None and stop.stopped and os.environ.get(distributed.IN_CLUSTER_ENV) == "gke":
            print_error(err)
            # A pod stopped by SIGTERM (eviction, preemption) exits as one killed by it would: the JobSet's pod
            # failure policy restarts 143 (rlexp.launch.manifest.RESTART_EXIT_CODES) and fails the JobSet on
            # other codes, 1 included, which a stopped run would otherwise exit with.
            raise SystemExit(POD_STOPPED_EXIT) from None
        raise
    except KeyboardInterrupt:  # a second Ctrl-C: no unfinished checkpoint folder left for the resume to trip on
        from rlexp.train.write_failure import clean_temp

        clean_temp(plan.run_dir, settle_s=2.0)
        raise
    except Exception as err:
        from rlexp.train.write_failure import as_run_error

        failure = as_run_error(plan.run_dir, err)  # a full disk: one line, nothing lost
        if failure is None:
            raise
        raise failure from err
    finally:
        heap.release(collecting)
    value = rundir.dotted_get(summary, conf.objective)
    if not isinstance(value, int | float):
        raise ConfigError("objective", conf.objective, "name a numeric key of summary.json, e.g. eval.after.pass_at_1")
    return float(value)
