"""The Hydra app of `python -m rlexp`: compose, plan the run once (rlexp.train.plan: every check), then train
here (or hand the job to a remote launcher).

Returns the sweep objective (a summary.json key, `objective=`) so Hydra sweepers can optimise it.
JAX and Tunix are imported only once a run actually trains, so `--cfg job` stays fast. The task
function lives in this importable module (not `__main__`) because Slurm jobs unpickle it by name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig

from rlexp import cli
from rlexp.config.load import CONF_DIR, register_configs, to_config

if TYPE_CHECKING:
    from rlexp.train.plan import RunPlan

register_configs()


def record_job(cfg: DictConfig, plan: RunPlan) -> Callable[[], None]:
    """Write `.hydra/{config,hydra,overrides}.yaml` as Hydra would have before the task function ran, and the
    run's plan.json; returns the undo, which puts the records, the plan and the run log back as they were.

    conf/config.yaml sets `hydra.output_subdir: null` so that Hydra writes nothing into the run dir: rlexp
    writes these records here, once every check passed, and a refused command (a resume with another
    config, a bad value, and through the undo bad data or templates found while a resume sets up) leaves an
    earlier run's records and run log as they were. report, export and jobs read them.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from rlexp import storage
    from rlexp.train.plan import PLAN_FILE

    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    records = out / ".hydra"
    log = out / f"{hc.job.name}.log"
    names = ("config.yaml", "hydra.yaml", "overrides.yaml")
    before = {n: (records / n).read_bytes() if (records / n).is_file() else None for n in names}
    had_records, log_size = records.is_dir(), log.stat().st_size if log.is_file() else None
    plan_before = storage.read_text(storage.join(plan.run_dir, PLAN_FILE))
    if hc.output_subdir is None:
        records.mkdir(parents=True, exist_ok=True)
        for name, node in (("config.yaml", cfg), ("hydra.yaml", HydraConfig.instance().cfg),
                           ("overrides.yaml", hc.overrides.task)):  # fmt: skip
            storage.write_text(str(records / name), OmegaConf.to_yaml(node))  # secrets scrubbed (rlexp.redact)
    plan.write()  # what this job decided, for a person and for the job that replays it
    cli.take_run_log(str(log))  # a failure's traceback goes there from now on

    def undo() -> None:
        if plan_before is not None:  # a refused job leaves no plan of its own
            storage.write_text(storage.join(plan.run_dir, PLAN_FILE), plan_before)
        elif not storage.is_url(plan.run_dir):
            (Path(plan.run_dir) / PLAN_FILE).unlink(missing_ok=True)
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
    """Check one job and plan it once (rlexp.train.plan), then submit it or train it; returns the objective."""
    from rlexp.sweep.resume import skip_if_completed

    done = skip_if_completed(cfg)  # sweep.resume=true: a job that completed earlier is not run again
    if done is not None:
        return done
    from hydra.core.hydra_config import HydraConfig

    from rlexp.envs import resolve
    from rlexp.launch.env_sidecar import pod_config, sidecars
    from rlexp.launch.remote import remote_launcher, submit
    from rlexp.train.plan import DONE, SUBMIT, make_plan

    typed = to_config(cfg)  # refuses keys no schema declares
    if sidecars(typed.env) and remote_launcher() == "gke":  # env.image: the pod's sidecar serves it, no docker here
        typed = pod_config(typed)
    conf = resolve(typed)  # env=...: the env's rows and scorer
    plan = make_plan(conf, cfg, str(HydraConfig.get().runtime.output_dir), remote_launcher)
    if plan.action == SUBMIT:  # TPU slice / remote launcher: submit, never train here
        return submit(cfg, str(plan.launcher))
    if plan.action == DONE:
        print(
            f"rlexp run {conf.run_name}: completed earlier after {plan.completed_steps} steps ({plan.run_dir}); "
            "nothing to do (choose another hydra.run.dir to train again)",
            flush=True,
        )
        return float(plan.objective if plan.objective is not None else "nan")
    undo = record_job(cfg, plan)
    from rlexp.errors import RlexpError
    from rlexp.train.run import train  # heavy: JAX, Tunix

    metrics = Path(plan.records_dir) / "metrics.jsonl"
    size = metrics.stat().st_size if metrics.is_file() else -1
    try:
        return train(plan, conf, cfg)
    except RlexpError:  # refused while setting up (data, templates): an earlier run's dir stays as it was
        if (metrics.stat().st_size if metrics.is_file() else -1) == size:
            undo()
        raise


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> float:
    # A user error leaves the task function: Hydra records a multirun job as failed and goes on with the
    # next; rlexp.cli's handler prints it as one line at the end.
    return run(cfg)
