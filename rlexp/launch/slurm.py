"""`hydra/launcher=slurm`: each job of a sweep becomes one Slurm job through submitit; `rlexp.jobs` follows them.

Before anything is written into the sweep dir the cluster is checked (`check_cluster`): the Slurm commands on
PATH, the controller answering `scontrol ping`, the partition known to `sinfo` and large enough for the job.
Then every job's config is checked, the sweep is submitted (one sbatch: a job array, one task per JAX process)
and each job is recorded: `launcher.json` in its dir (job id, log files), its handle in sweep.json.

The submitting side waits through `squeue`, not through submitit's `sacct` poll, which fails (three warning
lines a poll) on clusters without accounting, and whose answer for a requeued job would end the wait early. A
job's result is its task 0's result file; a job that Slurm ended without one (a killed process, scancel, a node
failure) failed, with the last error line of its logs as the reason. A job stopped by SIGTERM (preemption,
`scontrol requeue`) leaves no result (rlexp.train.run) and is waited on until its rerun resumes and completes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rlexp.errors import ConfigError, RlexpError, RunError

COMMANDS = ("sbatch", "squeue", "scontrol", "sinfo", "scancel")
# States in which Slurm still holds the job: it may run (again) and write its result.
ACTIVE = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "SPECIAL_EXIT",
    "RESV_DEL_HOLD",
}
# Slurm holds the job for another run (after a requeue or preemption), not running it now.
REQUEUED = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT"}
# After Slurm reports a job ended, how long its result file may take to appear (shared file systems lag).
RESULT_GRACE_S = 15.0
LOCAL_FIX = "on this machine, scripts/local_slurm.sh up starts a one-node Slurm"
ERROR_LINE_CHARS = 300


# ---- the Slurm commands -------------------------------------------------------------------------------------
def _run(args: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise RlexpError(
            f"hydra/launcher=slurm: {args[0]} not found on PATH; run from a Slurm login node, install the Slurm "
            f"client (Debian: apt-get install slurm-client); {LOCAL_FIX}"
        ) from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(args), 124, "", f"{args[0]}: no answer within {timeout:.0f} s")


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else "no output"


def slurm_conf() -> str:
    """The slurm.conf the Slurm commands read here."""
    return os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"


@dataclass
class Partition:
    name: str
    default: bool
    available: str
    nodes: int = 0
    cpus: int = 0  # per node, the largest node
    gpus: int = 0  # per node, the largest node


def partitions() -> dict[str, Partition]:
    """The cluster's partitions from `sinfo` (one row per partition and node configuration)."""
    done = _run(["sinfo", "-h", "-o", "%P|%a|%D|%c|%G"])
    if done.returncode != 0:
        raise RunError(f"Slurm: sinfo failed ({_first_line(done.stderr)}); check SLURM_CONF={slurm_conf()}")
    out: dict[str, Partition] = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5:
            continue
        raw, avail, nodes, cpus, gres = parts[:5]
        name = raw.rstrip("*")
        p = out.setdefault(name, Partition(name, raw.endswith("*"), avail))
        p.nodes += int(nodes) if nodes.isdigit() else 0
        p.cpus = max(p.cpus, int(re.sub(r"\D.*", "", cpus) or 0))
        gpus = [int(n) for n in re.findall(r"gpu(?::[^:,()]+)?:(\d+)", gres)]
        p.gpus = max([p.gpus, *gpus])
    return out


def check_cluster(params: Mapping[str, Any]) -> None:
    """One line naming the Slurm setting and its fix when the cluster cannot take the jobs.

    Runs when the launcher is set up: before the sweep callback writes sweep.json, so a refused sweep leaves
    its dir as it was. `params` are the launcher's (hydra.launcher.*).
    """
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise RlexpError(
            f"hydra/launcher=slurm: {', '.join(missing)} not found on PATH; run from a Slurm login node, install "
            f"the Slurm client (Debian: apt-get install slurm-client); {LOCAL_FIX}"
        )
    if os.environ.get("SLURM_CONF") and not Path(os.environ["SLURM_CONF"]).is_file():
        # the Slurm commands would retry reading it for a minute before failing
        raise RunError(
            f"SLURM_CONF={os.environ['SLURM_CONF']}: no such file; point it at your cluster's slurm.conf or unset it "
            f"({LOCAL_FIX})"
        )
    ping = _run(["scontrol", "ping"], timeout=20)
    said = (ping.stdout + "\n" + ping.stderr).strip()
    if ping.returncode != 0 or " is UP" not in said:
        raise RunError(
            f"Slurm controller (SlurmctldHost in {slurm_conf()}): not answering (scontrol ping: {_first_line(said)}); "
            f"start slurmctld, or point SLURM_CONF at your cluster's slurm.conf ({LOCAL_FIX})"
        )
    known = partitions()
    names = ", ".join(sorted(known)) or "none"
    wanted = params.get("partition")
    if wanted:
        if wanted not in known:
            raise ConfigError(
                "hydra.launcher.partition", wanted, f"no such Slurm partition; use one of {names} (sinfo -s)"
            )
        part = known[wanted]
    else:
        default = [p for p in known.values() if p.default]
        if not default:
            raise ConfigError(
                "hydra.launcher.partition", None, f"the cluster has no default partition; name one of {names}"
            )
        part = default[0]
    key = f"hydra.launcher.partition={part.name}" if wanted else f"partition {part.name} (the default)"
    if part.available != "up":
        raise RunError(f"{key}: the partition is {part.available}; choose another one of {names}")
    nodes = int(params.get("nodes") or 1)
    tasks, per_task = int(params.get("tasks_per_node") or 1), int(params.get("cpus_per_task") or 1)
    gpus = int(params.get("gpus_per_node") or 0)
    fits = [  # (key, value, too big for the partition, what to do)
        (
            "hydra.launcher.nodes",
            nodes,
            nodes > part.nodes,
            f"the slice's {nodes} nodes do not fit: {key} has {part.nodes}; pick a smaller slice or another partition",
        ),
        (
            "hydra.launcher.tasks_per_node",
            tasks,
            bool(part.cpus) and tasks * per_task > part.cpus,
            f"{tasks} tasks x {per_task} CPUs need {tasks * per_task} CPUs a node; {key} has {part.cpus}",
        ),
        (
            "hydra.launcher.gpus_per_node",
            gpus,
            gpus > part.gpus,
            f"nodes of {key} have {part.gpus} GPU(s) (sinfo %G); pick a slice that fits or a GPU partition",
        ),
    ]
    for setting, value, too_big, fix in fits:
        if too_big:
            raise ConfigError(setting, value, fix)
    _checked.add(_settings_key(params))


def _settings_key(params: Mapping[str, Any]) -> str:
    keys = ("partition", "nodes", "tasks_per_node", "cpus_per_task", "gpus_per_node")
    return json.dumps({k: params.get(k) for k in keys}, default=str, sort_keys=True)


_checked: set[str] = set()  # settings already checked in this process (the sweep callback, then the launcher)


def is_slurm_launcher(target: str) -> bool:
    return target.endswith("rlexp_launchers.slurm_launcher.SlurmLauncher")


def check_launcher(config: Any) -> None:
    """`check_cluster` for a multirun whose launcher is `hydra/launcher=slurm` (the sweep callback's first step);
    nothing for other launchers."""
    from omegaconf import OmegaConf

    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    if is_slurm_launcher(target):
        from rlexp.errors import user_errors_from_resolvers

        with user_errors_from_resolvers():
            params = OmegaConf.to_container(config.hydra.launcher, resolve=True)
        check_cluster(params)  # type: ignore[arg-type]


def check_cluster_once(params: Mapping[str, Any]) -> None:
    """`check_cluster`, unless the same settings passed it already in this process."""
    if _settings_key(params) not in _checked:
        check_cluster(params)


def queue_states(handles: Iterable[str]) -> dict[str, tuple[str, str]] | None:
    """{handle: (state, reason)} for the jobs Slurm still knows (squeue keeps ended jobs for MinJobAge);
    None when squeue could not answer (the caller keeps waiting)."""
    ids = sorted({h.split("_")[0] for h in handles})
    if not ids:
        return {}
    done = _run(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(ids)])
    if done.returncode != 0:
        return {} if "Invalid job id" in done.stderr else None
    out = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3:
            out[parts[0]] = (parts[1], parts[2])
    return out


def _array_tasks(spec: str) -> list[str]:
    """`0-3,7%2` (a pending array's task ids, with its throttle) -> ["0", "1", "2", "3", "7"]."""
    out: list[str] = []
    for part in spec.split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out += [str(i) for i in range(int(lo), int(hi or lo) + 1)]
    return out


def job_info(handles: Iterable[str]) -> dict[str, dict[str, str]]:
    """`scontrol show job` fields (JobState, Reason, Restarts, SubmitTime, StdErr, ...) by handle, for the jobs
    Slurm still knows; one call per job id (an array's tasks come together, its pending ones in one record)."""
    out: dict[str, dict[str, str]] = {}
    for jid in sorted({h.split("_")[0] for h in handles}):
        done = _run(["scontrol", "show", "job", "-o", jid])
        if done.returncode != 0:
            continue
        for line in done.stdout.splitlines():
            fields = dict(re.findall(r"(\S+?)=(\S*)", line))
            if "JobId" not in fields:
                continue
            tasks = fields.get("ArrayTaskId", "")
            if not tasks or tasks == "N/A":
                out[fields["JobId"]] = fields
            for task in _array_tasks(tasks):
                out[f"{fields.get('ArrayJobId')}_{task}"] = fields
    return out


def _read(paths: Iterable[str | Path]) -> list[list[str]]:
    out = []
    for path in paths:
        try:
            out.append([line.strip() for line in Path(path).read_text(errors="replace").splitlines()])
        except OSError:
            continue
    return out


REQUEUE_LINE = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT \S+ DUE TO (JOB REQUEUE|PREEMPTION) \*\*\*")
TASK_DIED = re.compile(r"srun: error: \S+: tasks? [\d,-]+: (?!Exited with exit code 0\b)")


def task_death_line(paths: Iterable[str | Path]) -> str | None:
    """srun's line for the first task that died in the job's last run (`task 1: Killed`, `Aborted`, a non-zero
    exit): the cause when one process's death ends the others. The logs hold every run of a requeued job."""
    for lines in _read(paths):
        last_run = max((i for i, s in enumerate(lines) if REQUEUE_LINE.search(s)), default=-1)
        for s in lines[last_run + 1 :]:
            if TASK_DIED.match(s):
                return s[:ERROR_LINE_CHARS]
    return None


def last_error_line(paths: Iterable[str | Path]) -> str | None:
    """The line that says why a job failed, from its log files: rlexp's own one-line error first, then the
    first task srun saw die (or Slurm's last error line), then the last line of a Python traceback."""
    paths = list(paths)
    rlexp, slurm, python = [], [], []
    for lines in _read(paths):
        for s in lines:
            if s.startswith("rlexp: error:"):
                rlexp.append(s[len("rlexp: error:") :].strip())
            elif re.match(r"(srun|slurmstepd\S*|sbatch): error:", s):
                slurm.append(s)
            elif re.match(r"[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(: .*)?$", s):
                python.append(s)
    if rlexp:
        return rlexp[-1][:ERROR_LINE_CHARS]
    died = task_death_line(paths)
    if died or slurm:
        return died or slurm[-1][:ERROR_LINE_CHARS]
    return python[-1][:ERROR_LINE_CHARS] if python else None


def cancel(handles: Iterable[str]) -> subprocess.CompletedProcess[str]:
    return _run(["scancel", *handles])


# ---- the launcher -------------------------------------------------------------------------------------------
@dataclass
class SlurmJob:
    """One job of the sweep on its way through Slurm."""

    num: int
    overrides: list[str]
    out_dir: Path
    task_name: str
    submitted: Any = None  # submitit's Job
    handle: str = ""
    outcome: Any = None  # Hydra's JobReturn once known
    seen: str = ""
    ended_at: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def logs(self) -> list[str]:
        """Log files of every task, task 0's first (srun's own messages land in task 0's error log)."""
        out = []
        for t in range(self.submitted.num_tasks):
            paths = self.submitted.task(t).paths
            out += [str(paths.stderr), str(paths.stdout)]
        return out


def _job_return(job: SlurmJob, status: str, value: Any) -> Any:
    from hydra.core.utils import JobReturn, JobStatus

    ret = JobReturn(
        overrides=list(job.overrides), working_dir=str(job.out_dir), task_name=job.task_name, status=JobStatus[status]
    )
    ret.return_value = value
    return ret


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


def _record(job: SlurmJob, **fields: Any) -> None:
    """launcher.json in the job's dir (the job adds its nodes and task count when it starts)."""
    path = job.out_dir / "launcher.json"
    record: dict = {}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(old, dict) and old.get("handle") == job.handle:
            record = old
    except (OSError, ValueError):
        pass
    record.update(fields)
    job.out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


def launch_sweep(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
    """Hydra `Launcher.launch` for `hydra/launcher=slurm`: check, submit, record, wait, return each job's result."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititLauncher

    from rlexp.checks import check_config
    from rlexp.config.load import to_config
    from rlexp.errors import user_errors_from_resolvers
    from rlexp.launch.compose import SweepComposer
    from rlexp.sweep.resume import completed_objective

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
                job.outcome = _job_return(job, "COMPLETED", value)
                done.append(job)
                continue
        conf = to_config(composed.task)
        if conf.slice.kind == "tpu":
            raise ConfigError("slice", conf.slice.name, "TPU slices run on GKE: drop hydra/launcher=slurm")
        check_config(conf)  # a rule a job breaks stops the sweep before anything is queued
        job.extra["output_dir"] = conf.output_dir
        jobs.append(job)
    if jobs:
        fresh = _adopt_running(jobs)
        if fresh:
            _submit(launcher, SubmititLauncher, fresh, Singleton.get_state())
        _wait(jobs)
        _finish(launcher.config, jobs)
    return [j.outcome for j in sorted(jobs + done, key=lambda j: j.num)]


def _adopt_running(jobs: list[SlurmJob]) -> list[SlurmJob]:
    """Jobs an earlier invocation submitted that Slurm still queues or runs (the submitting process was killed,
    the sweep is resumed) are waited for, not submitted twice; returns the jobs left to submit."""
    from submitit.slurm.slurm import SlurmJob as SubmititJob

    records = {j.num: _read_record(j) for j in jobs}
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


def _read_record(job: SlurmJob) -> dict:
    try:
        rec = json.loads((job.out_dir / "launcher.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) and rec.get("launcher") == "slurm" and rec.get("handle") else {}


def _submit(launcher: Any, submitit_launcher: type, jobs: list[SlurmJob], singletons: Any) -> None:
    from rlexp.sweep import manifest
    from rlexp.tracking import context

    inner = submitit_launcher(**launcher.params)
    inner.setup(hydra_context=launcher.hydra_context, task_function=launcher.task_function, config=launcher.config)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    executor = _executor(inner, str(inner.params["submitit_folder"]))
    args = [(j.overrides, "hydra.sweep.dir", j.num, f"job_id_for_{j.num}", singletons) for j in jobs]
    try:
        submitted = executor.map_array(inner, *zip(*args, strict=True))
    except Exception as err:  # submitit raises its own errors with sbatch's answer inside
        raise RunError(
            f"sbatch refused the jobs ({_first_line(str(err).split('Error stream produced:')[-1])}); check "
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
        _record(job, **record)
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


def _result(job: SlurmJob) -> Any | None:
    """Task 0's result (Hydra's JobReturn), once its file is there."""
    from submitit.core.utils import pickle_load

    path = job.submitted.task(0).paths.result_pickle
    if not path.exists():
        return None
    try:
        outcome, value = pickle_load(path)
    except EOFError:  # being written
        return None
    if outcome == "success":
        return value
    lines = [ln for ln in str(value).splitlines() if ln.strip()]
    return _job_return(job, "FAILED", RunError(f"Slurm job {job.handle}: {lines[-1] if lines else 'failed'}"))


def _wait(jobs: list[SlurmJob]) -> None:
    """Until every job has a result or Slurm ended it without one; state changes are printed as they happen."""
    start = time.monotonic()
    last_query = answered_at = float("-inf")
    states: dict[str, tuple[str, str]] = {}
    answered = warned = False
    while True:
        open_jobs = [j for j in jobs if j.outcome is None]
        if not open_jobs:
            return
        elapsed = time.monotonic() - start
        # squeue 1, 2, 4 ... s after submission, then every 10 s; result files every second
        if time.monotonic() - last_query >= min(10.0, max(1.0, elapsed / 2)):
            answer = queue_states(j.handle for j in open_jobs)
            last_query = time.monotonic()
            if answer is not None:
                states, answered, answered_at = answer, True, last_query
            elif not warned:
                print("rlexp: squeue did not answer; waiting on the jobs' result files meanwhile", file=sys.stderr)
                warned = True
        for job in open_jobs:
            state, reason = states.get(job.handle, ("", ""))
            shown = f"{state} ({reason})" if state == "PENDING" and reason not in ("", "None") else state
            if shown and shown != job.seen:
                job.seen = shown
                print(f"rlexp: job {job.num} (Slurm {job.handle}): {shown}", flush=True)
            result = _result(job)
            if result is not None:
                # Wait until Slurm ends the job too (its tasks exit right after their results), so that what
                # the sweep reports and what squeue says agree; a task still running 10 s after its peers'
                # results is not waited for.
                tasks = job.submitted.num_tasks
                every = all(job.submitted.task(t).paths.result_pickle.exists() for t in range(tasks))
                job.ended_at = job.ended_at or time.monotonic()
                late = time.monotonic() - job.ended_at > 10.0
                # A state squeue gave before the result appeared is stale: a job that ended within a second of
                # starting still read PENDING, and was taken for a requeue and cancelled (its error then
                # read `tasks 0-1: Terminated`). Ask again; past 10 s (squeue silent) take the result as is.
                stale = answered_at < job.ended_at
                if stale and not late:
                    last_query = float("-inf")
                elif state not in ("RUNNING", "COMPLETING") or (every and late):
                    job.outcome = result
                    if state in REQUEUED and not stale:
                        # a requeue (preemption) that came after the run ended: the rerun would redo nothing
                        cancel([job.handle])
                        print(f"rlexp: job {job.num} (Slurm {job.handle}): ended before its requeue; rerun cancelled")
                else:
                    last_query = float("-inf")  # ask squeue again right away
                continue
            # Slurm ended it, or forgot it (squeue keeps ended jobs for MinJobAge), and no result came
            ended = bool(state) and state not in ACTIVE or (answered and not state and elapsed > RESULT_GRACE_S)
            if not ended:
                job.ended_at = None
                continue
            job.ended_at = job.ended_at or time.monotonic()
            if time.monotonic() - job.ended_at >= (RESULT_GRACE_S if state in ("COMPLETED", "") else 2.0):
                why = last_error_line(job.logs) or f"ended {state or 'unknown to squeue'} without a result"
                what = state.lower() if state else "gone"
                job.outcome = _job_return(job, "FAILED", RunError(f"Slurm job {job.handle} {what}: {why}"))
                print(f"rlexp: job {job.num} (Slurm {job.handle}): failed: {why}", flush=True)
        time.sleep(1.0)


def _finish(config: Any, jobs: list[SlurmJob]) -> None:
    """Failures into launcher.json and sweep.json (the job could not write them), the table, and the report."""
    from omegaconf import OmegaConf

    from rlexp.sweep import manifest, progress
    from rlexp.tracking import context

    failed = []
    for job in jobs:
        if job.outcome.status.name == "COMPLETED":
            _record(job, state="completed")
            continue
        err = job.outcome._return_value
        text = str(err) if isinstance(err, RlexpError) else f"{type(err).__name__}: {err}"
        died = task_death_line(job.logs)
        if died and not text.startswith(f"Slurm job {job.handle}"):
            # a process died and took the job down: that is the cause, what the other task raised the effect
            text = f"Slurm job {job.handle} failed: {died}"
            job.outcome.return_value = RunError(text)  # the sweep's own exit names it too
        job.extra["error"] = " ".join(text.split())[:ERROR_LINE_CHARS]
        _record(job, state="failed", error=job.extra["error"])
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
            print(f"rlexp: sweep report not written: {err}", file=sys.stderr)


# ---- rlexp.jobs ---------------------------------------------------------------------------------------------
@dataclass
class Record:
    job: str  # the job's dir relative to the given dir ("." for one job), or the Slurm job id given
    handle: str
    path: Path | None = None  # its launcher.json
    data: dict = field(default_factory=dict)


HANDLE = re.compile(r"\d+(_\d+)?")


def find_records(target: str) -> list[Record] | None:
    """Slurm jobs of a run or sweep dir (launcher.json files), or the Slurm job id given; None: not Slurm's."""
    root = Path(target)
    if not root.exists():
        return [Record(target, target)] if HANDLE.fullmatch(target) else None
    paths = [root / "launcher.json"] if (root / "launcher.json").exists() else sorted(root.glob("**/launcher.json"))
    out = []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # the GKE reader reports unreadable records
        if isinstance(data, dict) and data.get("launcher") == "slurm" and isinstance(data.get("handle"), str):
            rel = str(path.parent.relative_to(root)) if path.parent != root else "."
            out.append(Record(rel, data["handle"], path, data))
    out.sort(key=lambda r: (len(r.job), r.job))
    return out or None


def _age(stamp: str | None, now: float) -> str:
    if not stamp or stamp in ("Unknown", "None", "N/A"):
        return "-"
    try:
        t = datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return "-"
    s = max(0, int(now - t))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def rlexp_state(slurm_state: str) -> str:
    """pending | running | completed | failed | cancelled, from a Slurm job state."""
    if slurm_state in ("RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING"):
        return "running"
    if slurm_state in ACTIVE:
        return "pending"
    if slurm_state == "COMPLETED":
        return "completed"
    return "cancelled" if slurm_state == "CANCELLED" else "failed"


def _summary_state(rec: Record) -> str | None:
    if rec.path is None:
        return None
    run_dir = Path(rec.data.get("output_dir") or rec.path.parent)
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return "completed" if summary.get("status") == "completed" else "failed"


def status_rows(records: list[Record]) -> list[tuple[str, ...]]:
    """JOB, SLURM JOB, STATE, RESTARTS, AGE, ERROR: Slurm's word while it knows the job, else the job's files."""
    info = job_info(r.handle for r in records)
    now = time.time()
    rows = []
    for rec in records:
        fields = info.get(rec.handle)
        error = ""
        if fields is not None:
            slurm_state = fields.get("JobState", "?")
            state = rlexp_state(slurm_state)
            restarts, age = fields.get("Restarts", "0"), _age(fields.get("SubmitTime"), now)
            summary = _summary_state(rec)
            if state in ("failed", "cancelled") and summary == "completed":
                state = "completed"  # the run completed; Slurm ended a rerun a late requeue started
            elif state == "completed" and "failed" in (rec.data.get("state"), summary):
                state = "failed"  # Slurm's job ended normally, its run did not (an error the job reported)
            if state == "pending" and fields.get("Reason") not in (None, "None"):
                slurm_state = f"{slurm_state} ({fields['Reason']})"
        else:  # Slurm forgot it (MinJobAge): what the job and the submitting side wrote
            state = _summary_state(rec) or rec.data.get("state") or "unknown"
            restarts, age = "-", _age(rec.data.get("submitted"), now)
        if state in ("failed", "cancelled"):
            logs = list(rec.data.get("logs") or []) or ([fields["StdErr"]] if fields and fields.get("StdErr") else [])
            error = rec.data.get("error") or last_error_line(logs) or (fields or {}).get("Reason", "")
        rows.append((rec.job, rec.handle, state, restarts, age, error))
    return rows


HEADER = ("JOB", "SLURM JOB", "STATE", "RESTARTS", "AGE", "ERROR")


def log_path(rec: Record) -> Path:
    """Task 0's error log: where rlexp writes its progress, summary and errors (and srun its messages)."""
    logs = list(rec.data.get("logs") or [])
    if logs:
        return Path(logs[0])
    fields = job_info([rec.handle]).get(rec.handle)
    if not fields or not fields.get("StdErr"):
        raise RlexpError(f"Slurm job {rec.handle}: unknown to scontrol and no launcher.json names its logs")
    return Path(fields["StdErr"])


def stream_log(rec: Record, follow: bool) -> None:
    """Print the job's log; with `follow`, keep printing until Slurm no longer runs the job."""
    path = log_path(rec)
    pos = 0
    while True:
        if path.exists():
            with path.open("rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
        if not follow:
            return
        state = (queue_states([rec.handle]) or {}).get(rec.handle, ("", ""))[0]
        if state not in ACTIVE:
            follow = False  # one more read for what was written last
            continue
        time.sleep(1.0)


def cancel_jobs(records: list[Record]) -> list[str]:
    """scancel every job of the records that Slurm still runs or queues; one line per job."""
    info = job_info(r.handle for r in records)
    live = [r.handle for r in records if (info.get(r.handle) or {}).get("JobState", "") in ACTIVE]
    if live:
        done = cancel(live)
        if done.returncode != 0:
            raise RunError(f"scancel {' '.join(live)}: {_first_line(done.stderr)}")
    ended = {r.handle: (info.get(r.handle) or {}).get("JobState", "").lower() or "unknown to Slurm" for r in records}
    return [f"{h}: cancelled" if h in live else f"{h}: not running ({ended[h]})" for h in (r.handle for r in records)]
