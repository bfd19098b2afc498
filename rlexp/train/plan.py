"""A run's plan: every decision about one job, made once by the entry point before JAX is imported.

`make_plan` runs each check of a run exactly once, in the order a user meets their errors: the values of single
keys, whether a remote launcher takes the job, the config's rules (which give the memory estimate), the model
folder, the run dir (resume=never, a resume with another config), a run that already completed, the run dir's
lock, the newest restorable checkpoint (damaged newer ones set aside), and the cost estimate. The result, a
`RunPlan`, is what training trusts: `rlexp.train.run.train(plan)` repeats none of it. It is written to the run
dir as `plan.json` (the decisions a pod or Slurm job made, readable by a person) and `summary.json` carries it.
Nothing heavy is imported here: JAX starts only once training does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from rlexp import storage
from rlexp.config.schema import RlexpConfig

PLAN_FILE = "plan.json"
TRAIN, SUBMIT, DONE = "train", "submit", "done"


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

    @property
    def records(self) -> str:
        return storage.join(self.records_dir, ".hydra")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["set_aside"] = [{"step": step, "why": why} for step, why in self.set_aside]
        out["records"] = self.records
        return out

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


def make_plan(conf: RlexpConfig, cfg: Any, records_dir: str, remote: Callable[[], str | None]) -> RunPlan:
    """Check the job once and decide what it does; raises the first check's one-line error.

    `remote`: the remote launcher this single run is handed to (None: it trains here), asked once the values
    passed, so that a bad value is named before a submission.
    """
    from rlexp.config.values import check_values

    check_values(conf)  # before a submission too: an error names the key the user set
    launcher = remote()
    run_dir = str(conf.output_dir or records_dir)
    if launcher is not None:  # the launcher's own checks run there (rlexp.launch.prelaunch)
        return RunPlan(SUBMIT, run_dir, records_dir, launcher=launcher)
    from rlexp.checks import check_rules, estimates
    from rlexp.families.load import check_model_dir
    from rlexp.train.distributed import in_cluster_job, prepare_in_job

    memory = check_rules(conf)  # every other rule of the config; the memory estimate it checked
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
    from rlexp.train.checkpoints import fall_back_to_restorable, newest_step
    from rlexp.train.write_failure import warn_if_low_space

    warn_if_low_space(conf, run_dir)
    # a damaged newest checkpoint is set aside (or, when none is whole, the run stops) before JAX is imported
    set_aside = fall_back_to_restorable(run_dir, can_move=not in_cluster_job())
    rows = conf.dataset.train_size if conf.dataset.train_size > 0 else None  # checked by the rules already
    resume_step = newest_step(run_dir)
    return RunPlan(
        TRAIN,
        run_dir,
        records_dir,
        resume_step=resume_step,
        set_aside=tuple(set_aside.items()),
        lock=lock,
        checked_train_rows=rows,
        off_policy=off_policy_plan(conf, run_dir, resume_step, memory),
        **estimates(conf, memory),
    )


def off_policy_plan(conf: RlexpConfig, run_dir: str, resume_step: int, memory: dict[str, Any]) -> dict[str, Any] | None:
    """What trainer.off_policy changes in the run, its resume's queue file checked (RunError when it is gone)."""
    from rlexp.algorithms import off_policy

    if not off_policy.enabled(conf.trainer):
        return None
    from rlexp.train.off_policy import check_resume

    k = off_policy.staleness(conf.trainer)
    return {
        "max_staleness": k,
        "concurrent": off_policy.concurrent(conf),
        "queued_batches": k,
        "queue_bytes": memory.get("off_policy", 0),
        "staged_weight_bytes": memory.get("off_policy_staged_weights", 0),
        "resume_queue": check_resume(run_dir, resume_step) if resume_step else None,
    }
