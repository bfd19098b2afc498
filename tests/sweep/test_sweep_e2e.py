"""A real 2 × 2 sweep of the tiny default: manifest, kill midway, resume, wandb offline runs, report.

One sweep is shared by every test of this module (it trains four short jobs): it is killed with
SIGKILL once jobs 0 and 1 completed and job 2 opened its wandb run, then resumed in the same dir.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import SHORT, run_rlexp, start_rlexp
from tests.report.browser import open_report
from tests.sweep.helpers import env, read, rlexp

pytestmark = pytest.mark.slow

# SHORT's shapes, cut to 4 steps with one eval and one checkpoint at the end: five jobs train (job 2 twice), and
# nothing below depends on a mid-run eval or checkpoint
CUT = {"trainer.max_steps": "4", "trainer.eval_every": "4", "trainer.checkpoint_every": "4", "logger": "wandb"}
SWEEP = [
    "+sweep=lr_beta",
    "trainer.learning_rate=1e-3,3e-3",
    "trainer.beta=0,0.04",
    *[f"{k}={CUT.get(k, v)}" for k, v in (o.split("=", 1) for o in SHORT)],
]


@dataclass
class Sweep:
    dir: Path
    killed: dict  # sweep.json right after the kill
    before: dict[str, float]  # mtimes of files of the jobs completed before the kill
    resume: subprocess.CompletedProcess


def _kill_midway(sweep_dir: Path) -> None:
    log = open(sweep_dir.parent / "first.log", "w")  # noqa: SIM115 - handed to the child process
    proc = start_rlexp(
        "-m",
        *SWEEP,
        f"hydra.sweep.dir={sweep_dir}",
        env=env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the kill reaches wandb's service too
    )
    deadline = time.time() + 600
    try:
        while time.time() < deadline:
            summary = sweep_dir / "1" / "summary.json"
            if summary.exists() and (sweep_dir / "2" / "wandb_run.json").exists():
                break
            assert proc.poll() is None, (sweep_dir.parent / "first.log").read_text()[-3000:]
            time.sleep(0.5)
        else:
            raise AssertionError("the sweep did not reach job 2 in time")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    sweep_dir = tmp_path_factory.mktemp("e2e") / "lr_beta"
    _kill_midway(sweep_dir)
    killed = read(sweep_dir / "sweep.json")
    before = {
        str(p): p.stat().st_mtime
        for n in ("0", "1")
        for p in (sweep_dir / n / "summary.json", sweep_dir / n / "metrics.jsonl")
    }
    resume = rlexp("-m", *SWEEP, f"hydra.sweep.dir={sweep_dir}", "sweep.resume=true")
    assert resume.returncode == 0, resume.stderr[-4000:]
    return Sweep(sweep_dir, killed, before, resume)


def test_killed_sweep_left_a_manifest(sweep: Sweep) -> None:
    jobs = sweep.killed["jobs"]
    assert [j["num"] for j in jobs] == [0, 1, 2, 3]
    assert [j["state"] for j in jobs[:2]] == ["completed", "completed"]
    assert jobs[2]["state"] == "running" and jobs[3]["state"] == "pending"
    assert sweep.killed["swept_keys"] == ["trainer.learning_rate", "trainer.beta"]
    assert "trainer.learning_rate=0.003" in jobs[3]["overrides"] and "trainer.beta=0.04" in jobs[3]["overrides"]


def test_resume_runs_only_the_missing_jobs(sweep: Sweep) -> None:
    data = read(sweep.dir / "sweep.json")
    assert data["invocations"] == 2
    assert [j["state"] for j in data["jobs"]] == ["completed"] * 4
    for job in data["jobs"]:
        summary = read(sweep.dir / str(job["num"]) / "summary.json")
        assert summary["status"] == "completed"
        assert job["objective"] == pytest.approx(summary["eval"]["after"]["pass_at_1"])
    for path, mtime in sweep.before.items():
        assert Path(path).stat().st_mtime == mtime, f"{path} was rewritten: a completed job ran twice"
    for n in (0, 1):
        assert data["jobs"][n]["started"] == sweep.killed["jobs"][n]["started"]
    assert sweep.resume.stderr.count("not run again") + sweep.resume.stdout.count("not run again") == 2


def test_each_job_has_a_wandb_offline_run_and_the_resumed_job_appends(sweep: Sweep) -> None:
    data = read(sweep.dir / "sweep.json")
    for job in data["jobs"]:
        run = read(sweep.dir / str(job["num"]) / "wandb_run.json")
        assert run["id"] == job["wandb_run_id"] and run["group"] == data["group"] == "lr_beta-lr_beta"
        offline = sorted((sweep.dir / str(job["num"]) / "wandb").glob(f"offline-run-*-{run['id']}*"))
        expected = 2 if job["num"] == 2 else 1  # job 2 was killed after opening its run, then resumed into it
        assert len(offline) == expected, offline
        assert run["resumed"] is (job["num"] == 2)
        assert all((d / f"run-{run['id']}.wandb").exists() for d in offline)


def test_report_written_at_the_end_opens_in_chromium(sweep: Sweep) -> None:
    page = open_report(sweep.dir / "report.html")
    assert page.errors == []
    assert page.rows == 4
    curves = {"rewards/sum": 4, "eval/pass_at_1": 4, "kl": 4, "completions/mean_length": 4, "pass_at_k/1": 4}
    curves["pass_at_k/2"] = 4  # eval_k defaults to every power of two up to the sweep's eval_samples
    assert page.curves == curves  # pass@k over steps: one chart per k, a line per run


def test_report_cli_on_the_sweep_dir(sweep: Sweep, tmp_path: Path) -> None:
    out = tmp_path / "again.html"
    done = run_rlexp(str(sweep.dir), "--out", str(out), module="rlexp.report", env=env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "4 runs" in done.stderr and out.read_text().count('class="run-row"') == 4


def test_a_used_sweep_dir_needs_resume_and_the_same_arguments(sweep: Sweep) -> None:
    fresh = rlexp("-m", *SWEEP, f"hydra.sweep.dir={sweep.dir}", timeout=300)
    assert fresh.returncode == 2 and "sweep.resume=true" in fresh.stderr
    other = [o if not o.startswith("trainer.beta=") else "trainer.beta=0,0.1" for o in SWEEP]
    changed = rlexp("-m", *other, f"hydra.sweep.dir={sweep.dir}", "sweep.resume=true", timeout=300)
    assert changed.returncode == 2 and "resume with the same sweep arguments" in changed.stderr
    assert changed.stderr.count("\n") <= 3, changed.stderr  # one line, no traceback
