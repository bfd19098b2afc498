"""Hydra callback keeping `sweep.json`, printing the sweep table and writing the report at the end.

Registered in conf/config.yaml under `hydra.callbacks.rlexp_sweep`; it acts only in multiruns.
Job-level hooks run where the job runs (in-process for the local launcher); the manifest is
re-read from disk on every update so a launcher that runs jobs in other processes still works.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rlexp.errors import ConfigError, RlexpError, RunError, exit_with_message
from rlexp.sweep import manifest, progress
from rlexp.tracking import context

log = logging.getLogger(__name__)


def plan(config: DictConfig) -> tuple[list[list[str]] | None, list[str]]:
    """(job override lists in launch order or None when the sweeper decides them, swept keys)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweeper = OmegaConf.select(config, "hydra.sweeper") or {}
    raw = sweeper.get("params") if sweeper else None
    params = OmegaConf.to_container(raw, resolve=False) if isinstance(raw, DictConfig) else dict(raw or {})
    args = [f"{k}={v}" for k, v in params.items()] + list(OmegaConf.select(config, "hydra.overrides.task") or [])
    loader = None
    if any("glob(" in a for a in args):  # a glob() sweep lists a group's options through a config loader
        from rlexp.compat.hydra import config_loader
        from rlexp.config.load import CONF_DIR

        loader = config_loader(CONF_DIR)
    try:
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(args)
    except Exception:  # the sweeper reports what does not parse; the job list is then learnt job by job
        return None, list(params)
    from rlexp.launch.sweep_checks import check_expressions

    grid = str(sweeper.get("_target_", "")).endswith("BasicSweeper")
    check_expressions(parsed, grid=grid)  # an empty range, a step of 0, a bad interval: before sweep.json
    swept = []
    for o in parsed:
        key = o.get_key_element().lstrip("+")
        if o.is_sweep_override() and key not in swept:
            swept.append(key)
    for key in params:
        if key not in swept:
            swept.append(key)
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None, swept
    from rlexp.compat.hydra import split_basic_sweep

    try:
        return split_basic_sweep(parsed), swept
    except Exception:
        return None, swept


class SweepCallback(Callback):
    """Manifest, resume checks, progress table and end-of-sweep report for Hydra multiruns."""

    def __init__(self) -> None:
        self.report = True
        self.progress = True
        self._planned: int | None = None
        self._shown = ""

    def _show(self, data: dict) -> None:
        if not self.progress:
            return
        table = progress.render(data, width=200)
        if table != self._shown:  # the last job's end and the multirun's end often agree
            self._shown = table
            progress.show(data)

    def _read_flags(self, config: DictConfig) -> None:
        """`sweep.report` / `sweep.progress` from the task config (the callback itself takes no arguments)."""
        self.report = bool(OmegaConf.select(config, "sweep.report", default=True))
        self.progress = bool(OmegaConf.select(config, "sweep.progress", default=True))

    # ---- multirun (submitting process) ----
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            from rlexp.launch.slurm_cluster import check_launcher

            check_launcher(config)  # a Slurm that cannot take the jobs: one line, before sweep.json is written
            self._start(config)
        except RlexpError as err:
            exit_with_message(err)  # Hydra turns a callback exception into a warning

    def _start(self, config: DictConfig) -> None:
        self._read_flags(config)
        if str(OmegaConf.select(config, "hydra.launcher._target_") or "").endswith("GkeLauncher"):
            from rlexp.launch.gke import settings

            settings(config.hydra.launcher)  # e.g. max_restarts=-1: refused before sweep.json is written
        directory = context.sweep_dir(config, config.hydra.sweep.dir)
        resume = bool(OmegaConf.select(config, "sweep.resume"))
        jobs, swept = plan(config)
        existing = manifest.load(directory)
        if resume and existing is None:
            raise ConfigError(
                "sweep.resume",
                True,
                f"no {manifest.MANIFEST} in {directory}; pass the sweep dir to resume: hydra.sweep.dir=<that dir>",
            )
        if not resume and existing is not None and manifest.completed_nums(existing):
            raise ConfigError(
                "hydra.sweep.dir",
                directory,
                "this sweep dir already holds completed jobs; add sweep.resume=true to finish it, or pick a new dir",
            )
        direction = str(OmegaConf.select(config, "sweep.direction") or "maximize")
        if direction not in ("maximize", "minimize"):
            raise ConfigError("sweep.direction", direction, "use maximize or minimize")
        target = str(OmegaConf.select(config, "hydra.sweeper._target_") or "")
        if "optuna" in target.lower():
            for key in ("n_trials", "n_jobs"):
                value = OmegaConf.select(config, f"hydra.sweeper.{key}")
                if value is not None and (not isinstance(value, int) or value < 1):  # optuna: a traceback at the end
                    raise ConfigError(f"hydra.sweeper.{key}", value, "use an integer >= 1")
        data = existing if resume else None
        if data is None:
            data = manifest.new_manifest(
                directory,
                name=context.sweep_name(config),
                group=context.sweep_group(config, directory),
                objective=str(config.objective),
                direction=direction,
                sweeper="optuna" if "optuna" in target.lower() else target.rsplit(".", 1)[-1] or "basic",
            )
        manifest.refresh(directory, data)
        data["wandb"] = {
            "project": OmegaConf.select(config, "logger.project"),
            "entity": OmegaConf.select(config, "logger.entity"),
        }
        data["swept_keys"] = swept or data.get("swept_keys", [])
        data["invocations"] = int(data.get("invocations", 0)) + 1
        if jobs is not None:
            self._planned = len(jobs)
            for num, overrides in enumerate(jobs):
                record = manifest.get_job(data, num)
                if record is not None and record["overrides"]:
                    _check_same_job(num, record["overrides"], overrides)
                if record is None or record["state"] != "completed":
                    manifest.upsert_job(data, num, overrides=list(overrides), state="pending", objective=None)
        for job in data["jobs"]:
            local = (job.get("launcher") or {}).get("launcher") in (None, "local")
            if job["state"] == "running" and local:  # left over from a killed invocation
                job["state"] = "pending"
        data["state"] = "running"
        manifest.save(directory, data)
        if not str(OmegaConf.select(config, "hydra.launcher._target_") or "").endswith("BasicLauncher"):
            self._show(data)  # here each job's start shows it, after the sweeper's checks (one line if refused)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._read_flags(config)
        directory = context.sweep_dir(config, config.hydra.sweep.dir)
        data = manifest.load(directory)
        if data is None:
            return
        manifest.refresh(directory, data)
        if all(j["state"] in ("completed", "failed") for j in data["jobs"]):
            data["state"] = "completed" if all(j["state"] == "completed" for j in data["jobs"]) else "failed"
        manifest.save(directory, data)
        self._show(data)
        self._write_report(directory)

    # ---- jobs (where the job runs) ----
    def _job_manifest(self, config: DictConfig) -> tuple[str, dict, int, Any] | None:
        """(sweep dir, manifest, job number, Hydra config) inside a multirun job with a manifest, else None."""
        from hydra.core.hydra_config import HydraConfig

        from rlexp.train.distributed import primary_task

        if not context.in_multirun() or not primary_task():  # every task of a multi-process job runs the job
            return None
        self._read_flags(config)
        hc = HydraConfig.get()
        directory = context.sweep_dir(config, hc.sweep.dir)
        data = manifest.load(directory)
        return None if data is None else (directory, data, int(hc.job.num), hc)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        found = self._job_manifest(config)
        if found is None:
            return
        directory, data, num, hc = found
        overrides = list(hc.overrides.task)
        record = manifest.get_job(data, num)
        if record is not None and record.get("overrides"):
            try:
                _check_same_job(num, record["overrides"], overrides)
            except RlexpError as err:
                exit_with_message(err)  # Hydra turns a callback exception into a warning
        if record is not None and record["state"] == "completed" and config.sweep.resume:
            return  # the task returns the recorded objective without training
        manifest.upsert_job(
            data,
            num,
            overrides=overrides,
            output_dir=manifest.relative_dir(directory, context.job_dir(config)),
            state="running",
            started=manifest.now(),
            ended=None,
            objective=None,
            launcher=_where_this_runs(),
        )
        manifest.save(directory, data)
        self._show(data)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        found_manifest = self._job_manifest(config)
        if found_manifest is None:
            return
        directory, data, num, _hc = found_manifest
        job_dir = context.job_dir(config)
        found = manifest.read_job_files(job_dir, data["objective"]["name"])
        # The run dir's summary decides; a task that returned without one (e.g. it only submitted
        # the job somewhere) keeps what read_job_files inferred, else counts as completed.
        if job_return.status != JobStatus.COMPLETED:
            state = "failed"
        else:
            state = found.get("state", "completed")
        value = job_return._return_value if job_return.status == JobStatus.COMPLETED else None
        found.pop("state", None)
        manifest.upsert_job(data, num, **found)
        job = manifest.get_job(data, num)
        assert job is not None
        job["state"] = state
        ok = state == "completed"
        if ok and isinstance(value, int | float) and job.get("objective") is None:
            job["objective"] = float(value)
        failure = job_return._return_value if job_return.status == JobStatus.FAILED else None
        if isinstance(failure, BaseException):  # the reason, as the one-line error the user saw
            text = str(failure) if isinstance(failure, RlexpError) else f"{type(failure).__name__}: {failure}"
            job["error"] = " ".join(text.split())[:500]
        elif ok:
            job.pop("error", None)
        job["ended"] = manifest.now()
        finished = all(j["state"] in ("completed", "failed") for j in data["jobs"])
        if finished and self._planned is not None and len(data["jobs"]) >= self._planned:
            data["state"] = "completed" if all(j["state"] == "completed" for j in data["jobs"]) else "failed"
        from rlexp import train

        if train.stop_signal:  # SIGTERM / Ctrl-C during this job: the sweep stops with it
            if not ok:
                job["state"] = "pending"  # its checkpoint is saved: a resume finishes it
            if any(j["state"] == "pending" for j in data["jobs"]):
                data["state"] = "interrupted"
        manifest.save(directory, data)
        self._show(data)
        if train.stop_signal and any(j["state"] == "pending" for j in data["jobs"]):
            pending = sum(j["state"] == "pending" for j in data["jobs"])
            exit_with_message(
                RunError(
                    f"sweep stopped by {train.stop_signal[0]} in job {num}; {pending} job(s) pending"
                    f"{'' if ok else f', job {num} saved to resume'}; rerun the same command with sweep.resume=true "
                    f"to finish it ({directory})"
                )
            )
        if not ok and finished and self._planned is not None and len(data["jobs"]) >= self._planned:
            self._write_report(directory)  # Hydra raises after a failed job, skipping on_multirun_end

    def _write_report(self, directory: str) -> None:
        if not self.report:
            return
        try:
            from rlexp.report.build import write_report

            path = write_report([directory], out=None)
            print(f"sweep report: {path}", flush=True)  # stdout: stderr is for errors
        except Exception as err:  # a report problem must not fail a finished sweep
            log.warning("sweep report not written: %s", err)


def _where_this_runs() -> dict[str, str]:
    """The job's launcher record: its Slurm job inside one (as the submitting side recorded it), else this process."""
    from rlexp.train.distributed import in_submitit_slurm_job, slurm_job_handle

    if in_submitit_slurm_job():
        return {"launcher": "slurm", "handle": slurm_job_handle()}
    return {"launcher": "local", "handle": f"pid {os.getpid()}"}


def _check_same_job(num: int, recorded: list[str], now: list[str]) -> None:
    if manifest.comparable(list(recorded)) != manifest.comparable(list(now)):
        raise ConfigError(
            f"job {num}",
            " ".join(manifest.comparable(list(now))),
            f"the sweep dir recorded {' '.join(manifest.comparable(list(recorded)))!r} for this job; "
            "resume with the same sweep arguments",
        )
