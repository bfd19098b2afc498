"""Real Slurm: `python -m rlexp -m hydra/launcher=slurm slice=cpu-2x1 experiment=quick 'seed=0,1'` on the one-node
cluster of scripts/local_slurm.sh, followed through `python -m rlexp.jobs`.

Every job start costs imports, JAX's programs (from the compile cache once a job has run) and an eval: about
20 s on 2 cores, so one sweep carries most assertions:

- job 0 is requeued (`scontrol requeue`) once its first step is in metrics.jsonl: Slurm sends SIGTERM, both
  processes stop after the same step and checkpoint it, the job leaves no result, runs again and resumes from
  that checkpoint to a completed run;
- job 1 loses a process (SIGKILL to task 1 once its first step is logged): srun ends the job, and the sweep
  table, sweep.json and `rlexp.jobs status` say `failed` with srun's line;
- `hydra.sweep.dir=<dir> sweep.resume=true` then submits job 1 alone, which completes.

A one-job sweep fails inside its job (a model folder that does not exist where the job runs), and one is
cancelled through `rlexp.jobs cancel` while Slurm holds it (queued, with a start an hour away).

The preset's 20 steps are cut to 6, with the eval and the checkpoint at the end only, for time. A requeue
checkpoints on its SIGTERM. A run acts on a signal before an update (rlexp.train.hooks), and step 1 is in
metrics.jsonl once update 2 is done, so updates 3 to 6 leave the requeue's SIGTERM three steps to reach both
processes. With 4 steps it had one, and under load it once came after the last update had started: the job
then completed on its first run and there was nothing to resume. (A SIGTERM before update 1 stops a run
without a checkpoint; the job then starts again from scratch.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import run_rlexp, start_rlexp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

STEPS = 6
SMALL = [
    f"trainer.max_steps={STEPS}",
    f"trainer.eval_every={STEPS}",
    f"trainer.checkpoint_every={STEPS}",
    "trainer.eval_prompts=8",
    "trainer.eval_samples=1",
    "logger=none",
]
SWEEP = ["-m", "hydra/launcher=slurm", "slice=cpu-2x1", "experiment=quick", "seed=0,1", *SMALL]
TIMEOUT_S = 1500


def rlexp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m <args>`; stdout and stderr together, as a terminal shows them."""
    module, *rest = args
    return run_rlexp(*rest, module=module, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)


def last_step(run_dir: Path) -> int:
    """The newest step in metrics.jsonl (-1 before the first whole line)."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True) if path.exists() else []
    whole = [line for line in lines if line.endswith("\n")]
    return json.loads(whole[-1])["step"] if whole else -1


def record(job_dir: Path) -> dict:
    try:
        return json.loads((job_dir / "launcher.json").read_text())
    except (OSError, ValueError):
        return {}


def task_pid(handle: str, task: int) -> int | None:
    """The pid of one task of the job's first step (`scontrol listpids` takes the job's own id, not `<array>_<i>`)."""
    job_id = subprocess.run(["squeue", "-h", "-o", "%A", "-j", handle], capture_output=True, text=True).stdout.strip()
    out = subprocess.run(["scontrol", "listpids", job_id], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines()[1:]:
        pid, _job, step, _local, glob = (line.split() + [""] * 5)[:5]
        if step == "0" and glob == str(task):
            return int(pid)
    return None


def steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@dataclass
class Sweep:
    dir: Path
    first: subprocess.CompletedProcess[str] | None = None
    first_manifest: dict = field(default_factory=dict)
    first_status: str = ""
    status_while_running: str = ""
    requeued: str = ""
    killed: str = ""
    resumed: subprocess.CompletedProcess[str] | None = None
    final_status: str = ""
    seconds: dict[str, float] = field(default_factory=dict)


def drive(sweep: Sweep, proc: subprocess.Popen, stop: threading.Event) -> None:
    """Requeue job 0 and kill task 1 of job 1, each as soon as its first step is logged."""
    jobs = [sweep.dir / "0", sweep.dir / "1"]
    lifted = False
    while not stop.is_set() and proc.poll() is None:
        if not sweep.status_while_running and last_step(jobs[0]) >= 0:  # training, before the first step ends
            sweep.status_while_running = rlexp("rlexp.jobs", "status", str(sweep.dir)).stdout
        if not sweep.requeued and last_step(jobs[0]) >= 1:
            handle = record(jobs[0])["handle"]
            subprocess.run(["scontrol", "requeue", handle], check=True, capture_output=True)
            sweep.requeued = handle
        if sweep.requeued and not lifted:
            # Slurm holds a requeued job for two minutes before it may start again; lifting that hold once it is
            # pending keeps the test from idling (which job runs next is then the scheduler's choice; both orders
            # are handled)
            state = subprocess.run(["squeue", "-h", "-o", "%T", "-j", sweep.requeued], capture_output=True, text=True)
            if state.stdout.strip() == "PENDING":
                lift = ["scontrol", "update", f"JobId={sweep.requeued}", "StartTime=now"]
                lifted = subprocess.run(lift, capture_output=True).returncode == 0
        if not sweep.killed and sweep.requeued and last_step(jobs[1]) >= 1:
            handle = record(jobs[1])["handle"]
            pid = task_pid(handle, 1)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                sweep.killed = handle
        time.sleep(0.2)


@pytest.fixture(scope="module")
def sweep(local_slurm: str, tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    s = Sweep(tmp_path_factory.mktemp("slurm") / "sweep")
    start = time.monotonic()
    proc = start_rlexp(
        *SWEEP,
        f"hydra.sweep.dir={s.dir}",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    stop = threading.Event()
    driver = threading.Thread(target=drive, args=(s, proc, stop), daemon=True)
    driver.start()
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        subprocess.run(["scancel", "--name", "tiny-arith-grpo"], check=False)
        pytest.fail(f"the sweep did not end within {TIMEOUT_S} s:\n{out[-4000:]}")
    finally:
        stop.set()
        driver.join(10)
    s.first = subprocess.CompletedProcess(proc.args, proc.returncode, out, "")
    s.seconds["sweep"] = time.monotonic() - start
    s.first_manifest = json.loads((s.dir / "sweep.json").read_text())
    s.first_status = rlexp("rlexp.jobs", "status", str(s.dir)).stdout
    start = time.monotonic()
    s.resumed = rlexp("rlexp", *SWEEP, f"hydra.sweep.dir={s.dir}", "sweep.resume=true", timeout=TIMEOUT_S)
    s.seconds["resume"] = time.monotonic() - start
    s.final_status = rlexp("rlexp.jobs", "status", str(s.dir)).stdout
    print(f"slurm sweep: {s.seconds}", file=sys.stderr)
    return s


def test_the_sweep_ran_two_jobs_of_two_tasks_and_both_completed(sweep: Sweep) -> None:
    assert sweep.resumed is not None and sweep.resumed.returncode == 0, sweep.resumed.stdout[-3000:]
    manifest = json.loads((sweep.dir / "sweep.json").read_text())
    assert [j["state"] for j in manifest["jobs"]] == ["completed", "completed"] and manifest["state"] == "completed"
    for num in (0, 1):
        summary = json.loads((sweep.dir / str(num) / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["train"]["steps"] == STEPS
        assert summary["train"]["processes"] == 2  # one JAX runtime across the job's two Slurm tasks
        rec = record(sweep.dir / str(num))
        assert rec["launcher"] == "slurm" and rec["tasks"] == 2 and rec["nodes"] == "vm", rec
        assert steps(sweep.dir / str(num)) == list(range(STEPS + 1))  # every step once, the eval before as step 0
    assert "tiny-arith-grpo" in (sweep.dir / "report.html").read_text()


def test_a_requeued_job_resumes_from_its_checkpoint(sweep: Sweep) -> None:
    assert sweep.requeued, "job 0 was never requeued"
    job = sweep.dir / "0"
    log = Path(record(job)["logs"][0]).read_text()  # task 0's stderr; Slurm appends each run of the job to it
    assert "SIGTERM received; saving a checkpoint after this step" in log, log[-3000:]
    resumed = [int(line.rsplit(" ", 1)[1]) for line in log.splitlines() if line.startswith("rlexp: resuming")]
    assert len(resumed) == 1 and 1 <= resumed[0] < STEPS, log[-3000:]
    assert (job / "checkpoints" / "actor" / str(STEPS)).is_dir()
    # each run of the job replayed the plan its submitter wrote (RLEXP_PLAN names it), and the requeued run took its
    # resume step where it started: the submitter's plan has none
    assert f"RLEXP_PLAN: {job / 'plan.json'}" in (job / ".hydra" / "hydra.yaml").read_text()
    plan = json.loads((job / "plan.json").read_text())
    assert plan["resume_step"] == resumed[0] and len(plan["config_hash"]) == 64, plan
    # the jobs table showed it running before the requeue, and counts the restart
    row0 = next(line for line in sweep.status_while_running.splitlines() if line.startswith("0 "))
    assert sweep.requeued in row0 and " running " in row0, sweep.status_while_running
    row0 = next(line for line in sweep.first_status.splitlines() if line.startswith("0 "))
    assert row0.split()[1:4] == [sweep.requeued, "completed", "1"], sweep.first_status  # RESTARTS 1
    row0 = next(line for line in sweep.final_status.splitlines() if line.startswith("0 "))
    assert row0.split()[1:3] == [sweep.requeued, "completed"], sweep.final_status


def test_a_killed_process_fails_its_job_with_srun_s_line(sweep: Sweep) -> None:
    assert sweep.killed, "job 1's task 1 was never killed"
    assert sweep.first is not None and sweep.first.returncode != 0
    why = f"Slurm job {sweep.killed} failed: srun: error: vm: task 1: Killed"
    table = sweep.first.stdout[sweep.first.stdout.rindex("sweep tiny-arith-grpo") :]
    assert "!1" in table and why in table, table  # the sweep table, with its error column
    job1 = sweep.first_manifest["jobs"][1]
    assert (job1["state"], job1["error"]) == ("failed", why)
    row1 = next(line for line in sweep.first_status.splitlines() if line.startswith("1 "))
    assert " failed " in row1 and why in row1, sweep.first_status
    assert f"rlexp: error: {why}" in sweep.first.stdout  # and the sweep's exit says why


def test_a_sweep_resume_resubmits_only_the_failed_job(sweep: Sweep) -> None:
    assert sweep.resumed is not None
    assert "rlexp: submitted 1 Slurm job(s)" in sweep.resumed.stdout, sweep.resumed.stdout[-3000:]
    manifest = json.loads((sweep.dir / "sweep.json").read_text())
    assert manifest["jobs"][0]["launcher"]["handle"] == sweep.requeued  # job 0 was not submitted again
    assert manifest["jobs"][1]["launcher"]["handle"] != sweep.killed
    assert "error" not in manifest["jobs"][1]


def test_no_sacct_and_one_table_per_job(sweep: Sweep) -> None:
    assert sweep.first is not None and sweep.resumed is not None
    for out in (sweep.first.stdout, sweep.resumed.stdout):
        assert "sacct" not in out and "Bypassing" not in out and "accounting" not in out
    for num in (0, 1):
        logs = record(sweep.dir / str(num))["logs"]
        task1 = Path(logs[2]).read_text() + Path(logs[3]).read_text()
        assert "sweep tiny-arith-grpo" not in task1  # only task 0 keeps sweep.json and prints its table


def test_jobs_logs_prints_task_0_s_log(sweep: Sweep) -> None:
    done = rlexp("rlexp.jobs", "logs", str(sweep.dir / "1"), "--no-follow")
    assert done.returncode == 0 and f"rlexp run tiny-arith-grpo: completed after {STEPS} steps" in done.stdout


def test_a_bad_override_fails_inside_its_job(local_slurm: str, tmp_path: Path) -> None:
    """The model folder is read where the job runs, so only the job can refuse it; it fails before JAX starts."""
    missing = tmp_path / "no-model"
    done = rlexp(
        "rlexp", "-m", "hydra/launcher=slurm", "slice=cpu-2x1", "seed=0", *SMALL, f"model.path={missing}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", timeout=600,
    )  # fmt: skip
    assert done.returncode != 0
    manifest = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    error = manifest["jobs"][0]["error"]
    assert manifest["jobs"][0]["state"] == "failed" and error.startswith(f"model.path='{missing}': no such folder")
    assert error in done.stdout  # the sweep table
    assert done.stdout.count(f"rlexp: error: {error}") == 1, done.stdout[-3000:]
    status = rlexp("rlexp.jobs", "status", str(tmp_path / "sweep")).stdout
    assert " failed " in status and error[:60] in status, status


def test_a_resume_waits_for_a_job_still_queued_and_cancel_ends_it(local_slurm: str, tmp_path: Path) -> None:
    """The submitting process dies; its Slurm job goes on. A resume waits for that job instead of submitting it
    again, and `rlexp.jobs cancel` ends it: the resumed sweep reports it cancelled."""
    # A start an hour away (sbatch --begin) keeps the job queued whatever the load: it never starts, so no job
    # trains through the test (a 300-step job had to, and was cancelled while it compiled) and none can finish
    # before the cancel (one with 4 steps once had: the resumed sweep rightly reported it completed).
    later = "+hydra.launcher.additional_parameters.begin=now+1hour"
    args = ["-m", "hydra/launcher=slurm", "slice=cpu-2x1", "seed=0", *SMALL, later]
    args.append(f"hydra.sweep.dir={tmp_path / 'sweep'}")
    first = start_rlexp(*args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not record(tmp_path / "sweep" / "0").get("handle"):
        assert time.monotonic() < deadline and first.poll() is None, "no launcher.json"
        time.sleep(0.2)
    handle = record(tmp_path / "sweep" / "0")["handle"]
    first.kill()
    first.wait()
    log = tmp_path / "resume.log"
    with log.open("w") as out:
        resumed = start_rlexp(*args, "sweep.resume=true", stdout=out, stderr=subprocess.STDOUT)
    while "from an earlier submission" not in log.read_text():
        assert time.monotonic() < deadline + 60 and resumed.poll() is None, log.read_text()
        time.sleep(0.2)
    assert f"rlexp: job 0: Slurm job {handle} from an earlier submission is PENDING; waiting for it" in log.read_text()
    done = rlexp("rlexp.jobs", "cancel", str(tmp_path / "sweep"))
    assert done.returncode == 0 and done.stdout.strip() == f"{handle}: cancelled", done.stdout
    assert resumed.wait(timeout=300) != 0
    assert f"Slurm job {handle} cancelled" in log.read_text() and "submitted" not in log.read_text()
    again = rlexp("rlexp.jobs", "cancel", str(tmp_path / "sweep"))
    assert again.stdout.strip() == f"{handle}: not running (cancelled)"
