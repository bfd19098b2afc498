"""`hydra/launcher=slurm`'s `launch`: each job of a sweep becomes one Slurm job through submitit.

Every job's config is checked, the sweep is submitted (one sbatch: a job array, one task per JAX process)
and each job is recorded: `launcher.json` in its dir (job id, log files), its handle in sweep.json. Jobs an
earlier invocation submitted that Slurm still holds are waited for, not submitted again. After the wait
(rlexp.launch.slurm_wait) failures go into the records, the sweep's table and its report.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from rlexp.errors import ConfigError, RlexpError, RunError
from rlexp.launch.slurm_jobs import SlurmJob, job_return, read_record, write_record
from rlexp.launch.slurm_logs import ERROR_LINE_CHARS, task_death_line
from rlexp.launch.slurm_queue import ACTIVE, first_line, queue_states
from rlexp.launch.slurm_wait import wait

log = logging.getLogger(__name__)


def _executor(inner: Any, folder: str) -> Any:
    """submitit's Slurm executor with the launcher's settings, as hydra-submitit builds it, plus
    `srun --kill-on-bad-exit`: a task that dies ends its job instead of leaving the others in a collective."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    params = dict(inner.params)
    init: dict[str, Any] = {"folder": folder}
    if "max_num_timeout" in params:
        init["slurm_max_num_timeout"] = params["max_num_timeout"]
    executor = submitit.AutoExecutor(cluster="slurm", **init)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    update = {
        (k if k in base else f"slurm_{k}"): v
        for k, v in params.items()
        if k not in ("submitit_folder", "max_num_timeout")
    }
    srun = list(update.get("slurm_srun_args") or [])
    if not any(a.startswith(("--kill-on-bad-exit", "-K")) for a in srun):
        srun.append("--kill-on-bad-exit=1")
    update["slurm_srun_args"] = srun
    executor.update_parameters(**update)
    return executor


def launch_sweep(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
    """Hydra `Launcher.launch` for `hydra/launcher=slurm`: check, submit, record, wait, return each job's result."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititLauncher

    from rlexp.checks import check_config
    from rlexp.config.load import to_config
    from rlexp.envs import resolve
    from rlexp.errors import user_errors_from_resolvers
    from rlexp.launch.compose import SweepComposer
    from rlexp.sweep.resume import completed_objective
    from rlexp.train.plan import plan_submission

    setup_globals()
    HydraConfig.instance().set_config(launcher.config)  # for `${hydra:...}` in task configs
    composer = getattr(launcher, "composer", None)  # rlexp's sweeper hands over what its validation composed
    if composer is None or composer.master is not launcher.config:
        composer = SweepComposer(launcher.hydra_context.config_loader, launcher.config)
    jobs, done = [], []
    for i, overrides in enumerate(job_overrides):
        num = initial_job_idx + i
        with user_errors_from_resolvers():
            composed = composer.compose(list(overrides), num)
            resolved = composed.resolved
        job = SlurmJob(num, list(overrides), Path(composed.out_dir).absolute(), composed.name)
        if (resolved.get("sweep") or {}).get("resume"):
            value = completed_objective(str(job.out_dir), str(resolved.get("objective")))
            if value is not None:  # completed in an earlier invocation: not submitted again
                job.outcome = job_return(job, "COMPLETED", value)
                done.append(job)
                continue
        conf = resolve(to_config(composed.task))  # env=...: the config the job trains
        if conf.slice.kind == "tpu":
            raise ConfigError("slice", conf.slice.name, "TPU slices run on GKE: drop hydra/launcher=slurm")
        memory = check_config(conf)  # a rule a job breaks stops the sweep before anything is queued
        job.extra["output_dir"] = conf.output_dir
        run_dir = str(conf.output_dir or os.path.abspath(job.out_dir))  # as Hydra sets it in the job
        job.extra["plan"] = plan_submission(conf, resolved, run_dir, memory)  # the job replays it (RLEXP_PLAN)
        jobs.append(job)
    if jobs:
        fresh = _adopt_running(jobs)
        if fresh:
            _submit(launcher, SubmititLauncher, fresh, Singleton.get_state())
        wait(jobs)
        _finish(launcher.config, jobs)
    return [j.outcome for j in sorted(jobs + done, key=lambda j: j.num)]


def _adopt_running(jobs: list[SlurmJob]) -> list[SlurmJob]:
    """Jobs an earlier invocation submitted that Slurm still queues or runs (the submitting process was killed,
    the sweep is resumed) are waited for, not submitted twice; returns the jobs left to submit."""
    from submitit.slurm.slurm import SlurmJob as SubmititJob

    records = {j.num: read_record(j) for j in jobs}
    known = [r["handle"] for r in records.values() if r]
    states = queue_states(known) if known else {}
    fresh = []
    for job in jobs:
        rec = records[job.num]
        state = (states or {}).get(rec.get("handle", ""), ("", ""))[0]
        if not rec or state not in ACTIVE or not rec.get("submitit_folder"):
            fresh.append(job)
            continue
        folder = Path(rec["submitit_folder"]).parent / "%j"
        job.handle = rec["handle"]
        job.submitted = SubmititJob(folder=folder, job_id=job.handle, tasks=list(range(int(rec.get("tasks") or 1))))
        print(f"rlexp: job {job.num}: Slurm job {job.handle} from an earlier submission is {state}; waiting for it")
    return fresh


def with_plan(job: SlurmJob) -> list[str]:
    """The job's overrides for its Slurm job: its plan written to its run dir, and named by
    `hydra.job.env_set.RLEXP_PLAN` (Hydra sets the variable around the task, in every run of a requeued job)."""
    from rlexp import storage
    from rlexp.train.plan import PLAN_ENV, PLAN_FILE

    plan = job.extra["plan"]
    path = storage.join(plan.run_dir, PLAN_FILE)
    storage.write_text(path, json.dumps(plan.submitted(), indent=2) + "\n")
    return [*job.overrides, f"++hydra.job.env_set.{PLAN_ENV}={quoted(path)}"]


def quoted(value: str) -> str:
    """`value` as a quoted Hydra override value: a path may hold `,` `=` or spaces. Hydra unescapes a backslash
    only before a quote, so only those are doubled."""
    return "'" + re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", re.sub(r"(\\+)$", r"\1\1", value)) + "'"


def _submit(launcher: Any, submitit_launcher: type, jobs: list[SlurmJob], singletons: Any) -> None:
    from rlexp.sweep import manifest
    from rlexp.tracking import context

    inner = submitit_launcher(**launcher.params)
    inner.setup(hydra_context=launcher.hydra_context, task_function=launcher.task_function, config=launcher.config)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    executor = _executor(inner, str(inner.params["submitit_folder"]))
    args = [(with_plan(j), "hydra.sweep.dir", j.num, f"job_id_for_{j.num}", singletons) for j in jobs]
    try:
        submitted = executor.map_array(inner, *zip(*args, strict=True))
    except Exception as err:  # submitit raises its own errors with sbatch's answer inside
        raise RunError(
            f"sbatch refused the jobs ({first_line(str(err).split('Error stream produced:')[-1])}); check "
            "hydra.launcher.partition, nodes, gpus_per_node and timeout_min against sinfo"
        ) from None
    now = datetime.now().astimezone().isoformat(timespec="seconds")
    for job, sub in zip(jobs, submitted, strict=True):
        job.submitted, job.handle = sub, str(sub.job_id)
        record = {
            "launcher": "slurm",
            "handle": job.handle,
            "tasks": sub.num_tasks,
            "submitted": now,
            "submitit_folder": str(sub.paths.folder),
            "logs": job.logs,
            "state": "pending",
        }
        if job.extra.get("output_dir"):
            record["output_dir"] = job.extra["output_dir"]
        write_record(job, **record)
    directory = context.sweep_dir(launcher.config, str(sweep_dir))
    data = manifest.load(directory)
    if data is not None:
        for job in jobs:
            entry = manifest.upsert_job(
                data,
                job.num,
                overrides=job.overrides,
                output_dir=manifest.relative_dir(directory, str(job.out_dir)),
                state="pending",
                launcher={"launcher": "slurm", "handle": job.handle},
                started=None,
                ended=None,
            )
            entry.pop("error", None)
        manifest.save(directory, data)
    first, last = jobs[0].handle, jobs[-1].handle
    span = first if len(jobs) == 1 else f"{first} … {last}"
    print(
        f"rlexp: submitted {len(jobs)} Slurm job(s) ({span}) with {jobs[0].submitted.num_tasks} task(s) each; "
        f"python -m rlexp.jobs status {directory}",
        flush=True,
    )


def _finish(config: Any, jobs: list[SlurmJob]) -> None:
    """Failures into launcher.json and sweep.json (the job could not write them), the table, and the report."""
    from omegaconf import OmegaConf

    from rlexp.sweep import manifest, progress
    from rlexp.tracking import context

    failed = []
    for job in jobs:
        if job.outcome.status.name == "COMPLETED":
            write_record(job, state="completed")
            continue
        err = job.outcome._return_value
        text = str(err) if isinstance(err, RlexpError) else f"{type(err).__name__}: {err}"
        died = task_death_line(job.logs)
        if died and not text.startswith(f"Slurm job {job.handle}"):
            # a process died and took the job down: that is the cause, what the other task raised the effect
            text = f"Slurm job {job.handle} failed: {died}"
            job.outcome.return_value = RunError(text)  # the sweep's own exit names it too
        job.extra["error"] = " ".join(text.split())[:ERROR_LINE_CHARS]
        write_record(job, state="failed", error=job.extra["error"])
        failed.append(job)
    directory = context.sweep_dir(config, str(config.hydra.sweep.dir))
    data = manifest.load(directory)
    if data is None or not failed:
        return  # all completed: the sweep callback's end shows the table and writes the report
    manifest.refresh(directory, data)
    for job in failed:
        entry = manifest.upsert_job(data, job.num, state="failed", ended=manifest.now())
        entry["state"] = "failed"
        entry["error"] = job.extra["error"]
    if all(j["state"] in ("completed", "failed") for j in data["jobs"]):
        data["state"] = "failed"
    manifest.save(directory, data)
    if bool(OmegaConf.select(config, "sweep.progress", default=True)):
        progress.show(data)
    if bool(OmegaConf.select(config, "sweep.report", default=True)):
        try:
            from rlexp.report.build import write_report

            print(f"sweep report: {write_report([directory], out=None)}", flush=True)
        except Exception as err:  # a report problem must not hide the jobs' failure
            log.warning("sweep report not written: %s", err)
