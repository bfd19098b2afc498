"""The Hydra app of `python -m rlexp`: compose, check, then train here (or hand the job to a remote launcher).

Returns the sweep objective (a summary.json key, `objective=`) so Hydra sweepers can optimise it.
JAX and Tunix are imported only once a run actually trains, so `--cfg job` stays fast. The task
function lives in this importable module (not `__main__`) because Slurm jobs unpickle it by name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from rlexp import cli
from rlexp.config.load import CONF_DIR, register_configs, to_config

register_configs()


def record_job(cfg: DictConfig) -> Callable[[], None]:
    """Write `.hydra/{config,hydra,overrides}.yaml` as Hydra would have before the task function ran; returns
    the undo, which puts the records and the run log back as they were.

    conf/config.yaml sets `hydra.output_subdir: null` so that Hydra writes nothing into the run dir: rlexp
    writes these records here, once every check passed, and a refused command (a resume with another
    config, a bad value, and through the undo bad data or templates found while a resume sets up) leaves an
    earlier run's records and run log as they were. report, export and jobs read them.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    records = out / ".hydra"
    log = out / f"{hc.job.name}.log"
    names = ("config.yaml", "hydra.yaml", "overrides.yaml")
    before = {n: (records / n).read_bytes() if (records / n).is_file() else None for n in names}
    had_records, log_size = records.is_dir(), log.stat().st_size if log.is_file() else None
    if hc.output_subdir is None:
        records.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, records / "config.yaml")
        OmegaConf.save(HydraConfig.instance().cfg, records / "hydra.yaml")
        OmegaConf.save(hc.overrides.task, records / "overrides.yaml")
    cli.take_run_log(str(log))  # a failure's traceback goes there from now on

    def undo() -> None:
        if not had_records:  # a new run dir keeps what its failure wrote: main.log holds the traceback
            return
        cli.take_run_log(None)
        for name, data in before.items():
            if data is None:
                (records / name).unlink(missing_ok=True)
            else:
                (records / name).write_bytes(data)
        if log_size is None:
            log.unlink(missing_ok=True)
        elif log.is_file():
            with log.open("r+b") as f:
                f.truncate(log_size)

    return undo


def run(cfg: DictConfig) -> float:
    """Check and train one job; returns the objective value."""
    from rlexp.sweep.resume import skip_if_completed

    done = skip_if_completed(cfg)  # sweep.resume=true: a job that completed earlier is not run again
    if done is not None:
        return done
    from hydra.core.hydra_config import HydraConfig

    from rlexp.config.values import check_values
    from rlexp.launch.remote import launch_remotely

    conf = to_config(cfg)  # refuses keys no schema declares (`+trainer.learning_rat=...`)
    check_values(conf)  # before a submission too: an error names the key the user set
    handed_off, result = launch_remotely(cfg)  # TPU slice / remote launcher: submit, never train here
    if handed_off:
        return result
    from rlexp.checks import check_config

    check_config(conf)
    if conf.trainer.algorithm == "opd":  # its teacher's folder and tokenizer (rlexp.train.opd)
        from rlexp.train.opd import check

        check(conf)
    from rlexp.models.loader import check_model_dir
    from rlexp.train.distributed import prepare_in_job

    check_model_dir(conf.model)  # a local model folder: config.json and whole safetensors, before JAX
    from rlexp.train.rundir import check_run_dir

    prepare_in_job()  # in a pod or Slurm job: Pathways / jax.distributed
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    check_run_dir(conf, cfg, str(conf.output_dir or run_dir))  # resume=never, a resume with another config
    done = _finished_or_locked(conf, str(conf.output_dir or run_dir))
    if done is not None:
        return done
    from rlexp.train.checkpoints import fall_back_to_restorable
    from rlexp.train.distributed import in_cluster_job

    # a damaged newest checkpoint is set aside (or, when none is whole, the run stops) before JAX is imported
    fall_back_to_restorable(str(conf.output_dir or run_dir), can_move=not in_cluster_job())
    undo = record_job(cfg)
    from rlexp.errors import RlexpError
    from rlexp.train.run import train  # heavy: JAX, Tunix

    metrics = run_dir / "metrics.jsonl"
    size = metrics.stat().st_size if metrics.is_file() else -1
    try:
        return train(conf, cfg, run_dir)
    except RlexpError:  # refused while setting up (data, templates): an earlier run's dir stays as it was
        if (metrics.stat().st_size if metrics.is_file() else -1) == size:
            undo()
        raise


def _finished_or_locked(conf: Any, run_dir: str) -> float | None:
    """A run that completed every step of this config there: said in one line, nothing changed, its objective
    returned. Else this process takes the run dir's lock (rlexp.train.runlock) and None is returned."""
    from rlexp.train import runlock
    from rlexp.train.distributed import in_cluster_job
    from rlexp.train.rundir import dotted_get

    summary = runlock.finished_run(conf, run_dir)
    if summary is not None:
        value = dotted_get(summary, conf.objective)
        print(
            f"rlexp run {conf.run_name}: completed earlier after {summary['train']['steps']} steps ({run_dir}); "
            "nothing to do (choose another hydra.run.dir to train again)",
            flush=True,
        )
        return float(value) if isinstance(value, int | float) else float("nan")
    if not in_cluster_job():
        runlock.take(run_dir)
    from rlexp.train.write_failure import warn_if_low_space

    warn_if_low_space(conf, run_dir)
    return None


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> float:
    # A user error leaves the task function: Hydra records a multirun job as failed and goes on with the
    # next; rlexp.cli's handler prints it as one line at the end.
    return run(cfg)
