"""Two real `python -m rlexp` processes (slice=cpu-2x1) train one run data-parallel, as a launcher starts them.

Each process gets what a multi-controller launcher gives its tasks (rlexp.train.distributed reads it):
the coordinator address and port, the process count and this process's id. The two join one JAX runtime
(one CPU device each, gloo collectives) and must train exactly what one process trains with the same
global batch: process 0 alone writes the run files, both write and restore the checkpoints. The tests share one
such run, with an eval and a checkpoint every step, stopped by SIGTERM after step 2 and resumed to the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import SHORT, run_rlexp, start_rlexp

pytestmark = pytest.mark.slow

TIMEOUT_S = 600
# Per-step values are compared within float32 reduction-order noise (measured: 1.4e-6 on grad_norm);
# perf/* are timings and differ by nature.
ATOL, RTOL = 1e-4, 1e-3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_two(run_dir: Path, logs: Path, overrides: tuple[str, ...] = ()) -> list[subprocess.Popen]:
    """Both processes of a cpu-2x1 job, with the environment of a multi-controller launcher."""
    port = str(free_port())
    procs = []
    for i in range(2):
        env = {
            **os.environ,
            "RLEXP_IN_CLUSTER": "gke",
            "JAX_COORDINATOR_ADDRESS": "127.0.0.1",
            "JAX_COORDINATOR_PORT": port,
            "JAX_PROCESS_COUNT": "2",
            "JAX_PROCESS_ID": str(i),
            "JAX_DEBUG_LOG_MODULES": "jax._src.compiler",  # with -v: which process compiled each program
        }
        log = open(logs / f"process{i}.log", "a")  # noqa: SIM115 - the child keeps its own descriptor
        args = ["-v", "slice=cpu-2x1", *SHORT, *overrides, f"hydra.run.dir={run_dir}"]
        procs.append(start_rlexp(*args, env=env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    return procs


def wait_all(procs: list[subprocess.Popen], logs: Path) -> list[int]:
    deadline = time.monotonic() + TIMEOUT_S
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.wait()
        pytest.fail(f"2-process run still running after {TIMEOUT_S} s\n{tails(logs)}")


def tails(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(logs.glob("process*.log")))


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def last_step(run_dir: Path) -> int:
    """The newest step in metrics.jsonl while the run writes it (-1 before the first whole line)."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True) if path.exists() else []
    whole = [line for line in lines if line.endswith("\n")]
    return json.loads(whole[-1])["step"] if whole else -1


def assert_same_training(run_dir: Path, reference: Path) -> None:
    """Every step once, and every value the 1-process run logged, within float noise."""
    got, want = metrics(run_dir), metrics(reference)
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(range(0, 9))
    for g, w in zip(got, want, strict=True):
        for key, value in w.items():
            if key.startswith("perf/") or "/latency_" in key or key == "step":  # timings, not training
                continue
            assert key in g, f"step {w['step']}: {key} missing"
            assert g[key] == pytest.approx(value, rel=RTOL, abs=ATOL), f"step {w['step']}: {key}"
    samples = (run_dir / "samples.jsonl").read_text().splitlines()
    assert len(samples) == len((reference / "samples.jsonl").read_text().splitlines())
    got_eval = json.loads((run_dir / "summary.json").read_text())["eval"]
    want_eval = json.loads((reference / "summary.json").read_text())["eval"]
    for when in ("before", "after"):
        assert got_eval[when] == pytest.approx(want_eval[when], rel=RTOL, abs=ATOL), when


# The shared run's schedule: an eval and a checkpoint after every step. The mid-run eval starts while the rollout
# thread's collectives may still run; gloo aborted both processes ("collective mismatch") in 6 of 6 such runs
# before rlexp.train.collectives made the eval wait for them.
EVERY_STEP = ("trainer.eval_every=1", "trainer.checkpoint_every=1")


@dataclass
class StoppedAndResumed:
    """One cpu-2x1 run, SIGTERMed after step 2 and rerun to the end: what each half left."""

    run_dir: Path
    logs: Path
    stop_codes: list[int]
    stop_summary: dict
    stop_checkpoints: list[str]
    codes: list[int]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run in one process with one device (slice=cpu): the same global batch."""
    run_dir = tmp_path_factory.mktemp("one") / "run"
    done = run_rlexp("slice=cpu", *SHORT, *EVERY_STEP, f"hydra.run.dir={run_dir}", timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def stopped_and_resumed(tmp_path_factory: pytest.TempPathFactory) -> StoppedAndResumed:
    """A Slurm requeue or pod eviction: SIGTERM reaches the processes a moment apart, then the job reruns. Each
    two-process start costs its processes' imports, traces and the programs process 0 compiles on a cold cache:
    the tests below share this run."""
    logs = tmp_path_factory.mktemp("two")
    run_dir = logs / "run"
    procs = start_two(run_dir, logs, EVERY_STEP)
    deadline = time.monotonic() + TIMEOUT_S
    while last_step(run_dir) < 2:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), tails(logs)
        time.sleep(0.2)
    procs[0].send_signal(signal.SIGTERM)
    time.sleep(0.5)
    procs[1].send_signal(signal.SIGTERM)
    stop_codes = wait_all(procs, logs)
    stop_summary = json.loads((run_dir / "summary.json").read_text())
    stop_checkpoints = sorted(p.name for p in (run_dir / "checkpoints" / "actor").iterdir())
    codes = wait_all(start_two(run_dir, logs, EVERY_STEP), logs)
    return StoppedAndResumed(run_dir, logs, stop_codes, stop_summary, stop_checkpoints, codes)


def test_two_processes_train_like_one(stopped_and_resumed: StoppedAndResumed, one_process: Path) -> None:
    """Every step trained by two processes (those before the stop and those after the resume) logs what one
    process logs; both processes write the checkpoints, process 0 alone the run files."""
    run = stopped_and_resumed
    assert run.codes == [0, 0], tails(run.logs)
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 8
    assert summary["train"]["processes"] == 2
    assert sorted(p.name for p in (run.run_dir / "checkpoints" / "actor").iterdir()) == ["7", "8"]  # keep 2
    assert_same_training(run.run_dir, one_process)


def test_sigterm_to_both_then_resume(stopped_and_resumed: StoppedAndResumed) -> None:
    """Both stop after the same step with its checkpoint, and the rerun resumes from it and completes."""
    run = stopped_and_resumed
    # interrupted: a one-line error and 143 on both, the status the JobSet restarts a pod after
    assert run.stop_codes == [143, 143], tails(run.logs)
    stopped = run.stop_summary["train"]["steps"]
    assert run.stop_summary["status"] == "interrupted" and 2 <= stopped < 8, run.stop_summary["train"]
    assert str(stopped) in run.stop_checkpoints
    assert run.codes == [0, 0], tails(run.logs)
    assert f"resuming {run.run_dir} from step {stopped}" in (run.logs / "process1.log").read_text()
    assert json.loads((run.run_dir / "summary.json").read_text())["status"] == "completed"


def test_process_1_compiles_no_program_both_run(stopped_and_resumed: StoppedAndResumed) -> None:
    """On one host process 0 compiles each program that spans both processes, and process 1 takes the binary it
    sends or reads the entry it wrote (rlexp.fixes.jax_cache_keys.share_compiled_programs). JAX's compiler log,
    switched on by JAX_DEBUG_LOG_MODULES, names each program's devices before it is compiled: process 1 compiles
    only programs of its own device (JAX caches those from process 0 alone, so every start compiles them)."""
    devices, own_compiles, both = "", 0, 0
    for line in (stopped_and_resumed.logs / "process1.log").read_text().splitlines():
        if "get_compile_options: " in line and "device_assignment=" in line:
            devices = line.partition("device_assignment=")[2]
            both += devices.count("CpuDevice") == 2
        elif "Not writing persistent cache entry since process_id != 0" in line:  # logged after a compile
            assert devices.count("CpuDevice") == 1, f"process 1 compiled a program of both processes: {devices}"
            own_compiles += 1
    assert both > 0 and own_compiles < both, (both, own_compiles)


def test_an_eval_and_a_checkpoint_every_step(stopped_and_resumed: StoppedAndResumed) -> None:
    """Both processes survive a mid-run eval and a checkpoint after every step, in both halves of the run."""
    run = stopped_and_resumed
    assert run.codes == [0, 0], tails(run.logs)
    evals = json.loads((run.run_dir / "evals.json").read_text())
    assert sorted(evals) == sorted([*map(str, range(1, 8)), "after", "before"])
    rows = metrics(run.run_dir)
    assert [r["step"] for r in rows] == list(range(0, 9))
    assert all("perf/checkpoint_time_sec" in r for r in rows if r["step"] > 0)
