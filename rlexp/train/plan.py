"""A run's plan: every decision about one job, made once, before JAX is imported.

`make_plan` runs each check of a run exactly once, in the order a user meets their errors: the values of single
keys, whether a remote launcher takes the job, the config's rules (which give the memory estimate), the model
folder, the run dir (resume=never, a resume with another config), a run that already completed, the run dir's
lock, the newest restorable checkpoint (damaged newer ones set aside), and the cost estimate. The result, a
`RunPlan`, is what training trusts: `rlexp.train.run.train(plan)` repeats none of it. It is written to the run
dir as `plan.json` (readable by a person) and `summary.json` carries it.

A job that a launcher submits (a GKE pod, a Slurm job) replays the submitter's plan instead of making its own.
The launcher checks the config and decides what follows from it alone (`plan_submission`: the run dir, the
memory and cost estimates, the train rows `max_steps` was checked against, the config's hash) and the job's
command carries that plan (`RLEXP_PLAN`: the plan's JSON in a JobSet's env, a path to the plan.json written
into the run dir for a Slurm job). The job refuses a plan made for another config or run dir in one line and
runs none of the submitter's checks again. What depends on the machine and the run dir *when the job starts*
is decided there, and again at every start (`_job_start`): Pathways / `jax.distributed`, the model folder
(read where the job runs), the run dir's checks, a run completed earlier, the lock, and the newest restorable
checkpoint with the resume step. A JobSet restarts its pods and Slurm requeues its jobs with the same command,
after checkpoints were written that no submitter saw: a resume step taken at submission would restart a
killed pod from scratch. Nothing heavy is imported here: JAX starts only once training does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from rlexp import storage
from rlexp.config.schema import RlexpConfig
from rlexp.errors import RunError

PLAN_FILE = "plan.json"
PLAN_ENV = "RLEXP_PLAN"  # in a submitted job: the submitter's plan, as JSON or the path of its plan.json
TRAIN, SUBMIT, DONE = "train", "submit", "done"
# What a submitter decides for its job (a local run decides it too, after its start's decisions)
SUBMITTED = ("action", "run_dir", "memory", "cost", "checked_train_rows", "config_hash")
# What a job decides where and when it starts, at every start
STARTED = ("action", "run_dir", "records_dir", "resume_step", "set_aside", "lock")
UNHASHED = ("output_dir",)  # where the run's files go is the plan's run_dir, checked on its own


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """The decisions of one run. `action`: train here, submit to `launcher`, or nothing (done earlier)."""

    action: str
    run_dir: str  # where the run's files go: output_dir, else Hydra's run dir
    records_dir: str  # Hydra's run dir: the .hydra/ records and the run log
    launcher: str | None = None  # action=submit: the remote launcher that takes the job
    resume_step: int = 0  # the newest restorable checkpoint's step; 0: training starts from scratch
    set_aside: tuple[tuple[int, str], ...] = ()  # damaged checkpoint steps moved aside, and why
    lock: str | None = None  # the run dir's lock this process holds (none in pods and Slurm jobs)
    memory: dict[str, Any] | None = None  # rlexp.estimates.memory.estimate_memory, per trainer chip
    cost: dict[str, Any] | None = None  # rlexp.estimates.cost.estimate_cost (or {"error": ...})
    checked_train_rows: int | None = None  # the train rows max_steps was checked against (dataset.train_size)
    # trainer.off_policy.max_staleness > 0: batches sampled ahead (k), whether a thread samples them on rollout
    # devices of their own, the queue's bytes, and the queue file a resumed run reads (rlexp.train.off_policy)
    off_policy: dict[str, Any] | None = None
    completed_steps: int | None = None  # action=done: the steps the earlier run completed
    objective: float | None = None  # action=done: that run's objective
    config_hash: str | None = None  # config_hash of the config planned: a job refuses a plan made for another

    @property
    def records(self) -> str:
        return storage.join(self.records_dir, ".hydra")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["set_aside"] = [{"step": step, "why": why} for step, why in self.set_aside]
        out["records"] = self.records
        return out

    def submitted(self) -> dict[str, Any]:
        """The submitter's decisions, as a submitted job's command carries them (`RLEXP_PLAN`)."""
        return {name: getattr(self, name) for name in SUBMITTED}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPlan:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        fields["set_aside"] = tuple((int(s["step"]), str(s["why"])) for s in data.get("set_aside", ()))
        return cls(**fields)

    def write(self) -> None:
        """plan.json in the run dir, indented for a person."""
        storage.write_text(storage.join(self.run_dir, PLAN_FILE), json.dumps(self.to_dict(), indent=2) + "\n")


def read_plan(run_dir: str) -> RunPlan | None:
    """The plan a run wrote to `run_dir`, or None."""
    data = storage.read_json(storage.join(run_dir, PLAN_FILE))
    return RunPlan.from_dict(data) if isinstance(data, dict) else None


def config_hash(resolved: Mapping[str, Any]) -> str:
    """SHA-256 of a resolved config (`OmegaConf.to_container(cfg, resolve=True)`, or a launcher's resolved dict),
    `output_dir` left out. Numbers are compared by value: a launcher's fast composition may hold 1 where
    Hydra's holds 1.0."""

    def canonical(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): canonical(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [canonical(v) for v in value]
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    kept = {k: v for k, v in resolved.items() if k not in UNHASHED}
    text = json.dumps(canonical(kept), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_submission(conf: RlexpConfig, resolved: Mapping[str, Any], run_dir: str, memory: dict[str, Any]) -> RunPlan:
    """The plan a launcher makes for a job it submits, once `rlexp.checks.check_config(conf)` passed (`memory`:
    its estimate): what follows from the config alone (a local run's plan holds the same). The job decides the
    rest when it starts (_job_start).

    `conf`: the config the job trains (rlexp.envs.resolve applied); `resolved`: the job's resolved config."""
    from rlexp.checks import estimates

    rows = conf.dataset.train_size if conf.dataset.train_size > 0 else None
    return RunPlan(
        TRAIN, run_dir, "", checked_train_rows=rows, config_hash=config_hash(resolved), **estimates(conf, memory)
    )


def carried_plan() -> RunPlan | None:
    """The submitter's plan this job's command carries (`RLEXP_PLAN`), or None: not a submitted job (a local run,
    `srun` by hand), or one submitted without a plan, which plans itself."""
    from rlexp.train.distributed import in_cluster_job

    text = os.environ.get(PLAN_ENV, "").strip()
    if not text or not in_cluster_job():
        return None
    try:
        data = json.loads(text) if text.startswith("{") else storage.read_json(text)
    except ValueError as err:
        raise RunError(f"{PLAN_ENV}: not a plan ({err}); submit the job again") from None
    if not isinstance(data, dict):
        raise RunError(
            f"{PLAN_ENV}={text}: no plan there; its submitter wrote it before submitting, so the run dir must be "
            "on a file system this node shares"
        )
    return RunPlan.from_dict({"records_dir": "", **data})


def _check_carried(plan: RunPlan, digest: str, run_dir: str) -> None:
    """A carried plan must be this job's: made for its config and its run dir."""
    if plan.config_hash != digest:
        raise RunError(
            f"{PLAN_ENV}: the plan was made for another config (hash {str(plan.config_hash)[:12]}, this job's "
            f"{digest[:12]}); submit the job again from the rlexp and conf/ the job runs"
        )
    if plan.run_dir != run_dir:
        raise RunError(
            f"{PLAN_ENV}: the plan was made for run dir {plan.run_dir}, this job writes to {run_dir}; "
            "submit the job again"
        )


def make_plan(conf: RlexpConfig, cfg: Any, records_dir: str, remote: Callable[[], str | None]) -> RunPlan:
    """Check the job once and decide what it does; raises the first check's one-line error.

    `remote`: the remote launcher this single run is handed to (None: it trains here), asked once the values
    passed, so that a bad value is named before a submission. A submitted job replays its submitter's plan
    (carried_plan) and decides only what a job decides when it starts.
    """
    from omegaconf import OmegaConf

    run_dir = str(conf.output_dir or records_dir)
    carried = carried_plan()
    memory: dict[str, Any] = {}
    if carried is None:
        from rlexp.config.values import check_values

        check_values(conf)  # before a submission too: an error names the key the user set
        launcher = remote()
        if launcher is not None:  # the launcher's own checks run there (rlexp.launch.prelaunch)
            return RunPlan(SUBMIT, run_dir, records_dir, launcher=launcher)
        from rlexp.checks import check_rules

        memory = check_rules(conf)  # every other rule of the config; the memory estimate it checked
    resolved: Mapping[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    if carried is not None:
        _check_carried(carried, config_hash(resolved), run_dir)
    started = _job_start(conf, cfg, run_dir, records_dir)
    if started.action == DONE:
        return started
    decided = carried or plan_submission(conf, resolved, run_dir, memory)
    plan = dataclasses.replace(decided, **{name: getattr(started, name) for name in STARTED})
    # trainer.off_policy: its queue as this start finds it (a resume's queued batches, checked before JAX)
    return dataclasses.replace(plan, off_policy=off_policy_plan(conf, run_dir, plan.resume_step, plan.memory or {}))


def _job_start(conf: RlexpConfig, cfg: Any, run_dir: str, records_dir: str) -> RunPlan:
    """What a job decides where and when it starts, at every start (a restarted pod, a requeued Slurm job): the
    in-job runtime, the model folder it reads, the run dir's checks, a run completed earlier, the lock, and the
    newest restorable checkpoint to resume from."""
    from rlexp.families.load import check_model_dir
    from rlexp.train.distributed import in_cluster_job, prepare_in_job

    check_model_dir(conf.model)  # a local model folder: config.json and whole safetensors, before JAX
    prepare_in_job()  # in a pod or Slurm job: Pathways / jax.distributed
    from rlexp.train import runlock
    from rlexp.train.rundir import check_run_dir, dotted_get

    check_run_dir(conf, cfg, run_dir)  # resume=never, a resume with another config
    summary = runlock.finished_run(conf, run_dir)
    if summary is not None:
        value = dotted_get(summary, conf.objective)
        objective = float(value) if isinstance(value, int | float) else float("nan")
        return RunPlan(DONE, run_dir, records_dir, completed_steps=summary["train"]["steps"], objective=objective)
    lock = None
    if not in_cluster_job():  # pods and Slurm jobs: their scheduler runs one job per dir
        runlock.take(run_dir)
        lock = storage.join(run_dir, runlock.LOCK)
    from rlexp.train.checkpoints import check_optimizer_layout, fall_back_to_restorable, newest_step
    from rlexp.train.write_failure import warn_if_low_space

    warn_if_low_space(conf, run_dir)
    # a damaged newest checkpoint is set aside (or, when none is whole, the run stops) before JAX is imported
    set_aside = fall_back_to_restorable(run_dir, can_move=not in_cluster_job())
    resume_step = newest_step(run_dir)
    check_optimizer_layout(run_dir, resume_step)
    return RunPlan(TRAIN, run_dir, records_dir, resume_step=resume_step, set_aside=tuple(set_aside.items()), lock=lock)


def off_policy_plan(conf: RlexpConfig, run_dir: str, resume_step: int, memory: dict[str, Any]) -> dict[str, Any] | None:
    """What trainer.off_policy changes in the run, its resume's queue file checked (RunError when it is gone)."""
    from rlexp.algorithms import off_policy

    if not off_policy.enabled(conf.trainer):
        return None
    from rlexp.train.off_policy import check_resume
    from rlexp.train.off_policy_learner import pipelined

    k = off_policy.staleness(conf.trainer)
    return {
        "max_staleness": k,
        "concurrent": off_policy.concurrent(conf),
        "pipelined_scoring": pipelined(conf),  # a batch scores while the next generates
        "queued_batches": k,
        "queue_bytes": memory.get("off_policy", 0),
        "staged_weight_bytes": memory.get("off_policy_staged_weights", 0),
        "resume_queue": check_resume(run_dir, resume_step) if resume_step else None,
    }
