"""Random kills of the commands a user types, chained until each completes, compared with an uninterrupted run.

A workload is a command (`python -m rlexp …`, a sweep, `rlexp eval …`) and the folder it writes. Its uninterrupted
reference runs once and is timed in CPU seconds (a clock that other processes' load does not stretch, so a moment
is the same point of the run's work on a busy machine as on an idle one); then a chain starts the same command in a
fresh folder and, at a moment drawn from a seeded RNG over the CPU time that invocation is expected to take, sends
SIGKILL or SIGTERM; the same command
resumes, is killed again at a new moment, and so on until a run completes (after `budget` kills the run is left
to finish). After every invocation: no process carrying the chain's tag is left running (a child that outlived
its parent), and after the last one no temporary file is left (orbax's tmp dirs, `.tmp-*`, `*.tmp`); the final
folder's deterministic content must equal the reference's bit for bit: metrics.jsonl rows (each step once), the
evals of summary.json and evals.json, every checkpoint step both hold (their arrays' bytes), and for `rlexp eval`
its result file. Wall-clock values are left out of the comparison: `WALL_CLOCK` names them.

Shared by tests/e2e/test_random_kills.py (fixed seeds, >= 30 kills in all) and
benchmarks/bench_random_kills.py.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.helpers import rlexp_command, rlexp_env

# Metric names whose values are wall-clock (step and eval times, reward latencies, ETAs, timestamps): excluded.
WALL_CLOCK = re.compile(
    r"(^|/)perf/|latency|_time_sec$|_sec$|_seconds$|timestamp|(^|/)time$|(^|/)eta$|elapsed|^seconds$"
)
TEMP_NAME = re.compile(r"tmp", re.IGNORECASE)  # orbax `<step>.orbax-checkpoint-tmp-*`, storage's `.tmp-*`, *.tmp
TAG = "RLEXP_FAULT_TAG"


@dataclass
class Workload:
    """`args` of `python -m <module>` writing into `target` (a run dir, a sweep dir, an eval result's run dir);
    `prepare(target)` readies a fresh target (e.g. a trained run to evaluate); `compare` gathers what must match."""

    name: str
    args: Callable[[Path], list[str]]
    module: str = "rlexp"
    prepare: Callable[[Path], None] | None = None
    state: Callable[[Path], dict[str, Any]] | None = None
    env: dict[str, str] = field(default_factory=dict)
    checkpoints: bool = True  # compare the checkpoints the folder's runs wrote


@dataclass
class Kill:
    workload: str
    attempt: int
    at_s: float  # CPU seconds the attempt had used
    sig: str
    status: int | None  # the killed command's exit status (None: it completed before the moment)


@dataclass
class ChainResult:
    workload: str
    kills: list[Kill]
    equal: bool
    problems: list[str]
    seconds: float
    fresh_s: float | None = None  # CPU time of the chain's first attempt when it completed before its moment


# ---- what must be equal ------------------------------------------------------------------------------------------


def _clean(value: Any) -> Any:
    """`value` with wall-clock keys dropped, recursively; NaN as a string so that equal NaNs compare equal."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not WALL_CLOCK.search(str(k))}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def excluded_keys(folder: Path) -> list[str]:
    """The wall-clock keys the comparison of `folder`'s metrics.jsonl files leaves out (to report them)."""
    names: set[str] = set()
    for path in folder.rglob("metrics.jsonl"):
        for line in path.read_text().splitlines():
            names.update(k for k in json.loads(line) if WALL_CLOCK.search(k))
    return sorted(names)


@functools.lru_cache(maxsize=64)
def _reference_arrays(step_dir: Path) -> dict[str, bytes]:
    """`_checkpoint_arrays` of a reference's step, read once for every chain compared with it."""
    return _checkpoint_arrays(step_dir)


def _checkpoint_arrays(step_dir: Path) -> dict[str, bytes]:
    """Every array of a checkpoint step (model_params, optimizer_state) as raw bytes, keyed by its path."""
    import numpy as np
    import orbax.checkpoint as ocp

    out: dict[str, bytes] = {}
    with ocp.PyTreeCheckpointer() as ckptr:
        for item in sorted(p for p in step_dir.iterdir() if (p / "_METADATA").exists()):
            tree = ckptr.restore(item)
            for path, leaf in _flatten(tree, item.name):
                arr = np.asarray(leaf)
                out[path] = f"{arr.dtype}{arr.shape}".encode() + arr.tobytes()
    return out


def _flatten(tree: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(tree, dict):
        return [kv for k in sorted(tree, key=str) for kv in _flatten(tree[k], f"{prefix}/{k}")]
    if isinstance(tree, list | tuple):
        return [kv for i, v in enumerate(tree) for kv in _flatten(v, f"{prefix}/{i}")]
    return [(prefix, tree)]


def run_state(run_dir: Path) -> dict[str, Any]:
    """A training run's deterministic content: metrics rows in file order, the summary's and evals.json's evals,
    the final status, and the checkpoint steps (their arrays compared apart: `checkpoints_equal`)."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = run_dir / "evals.json"
    return {
        "rows": _clean(rows),
        "steps": [r["step"] for r in rows],
        "status": summary.get("status"),
        "train_steps": summary.get("train", {}).get("steps"),
        "summary_eval": _clean(summary.get("eval")),
        "evals": _clean(json.loads(evals.read_text())) if evals.exists() else None,
    }


def checkpoint_steps(run_dir: Path) -> list[int]:
    actor = run_dir / "checkpoints" / "actor"
    return sorted(int(p.name) for p in actor.iterdir() if p.name.isdigit()) if actor.is_dir() else []


def compare_runs(
    got: Path, ref: Path, state: Callable[[Path], dict[str, Any]] = run_state, checkpoints: bool = True
) -> list[str]:
    """What differs between a killed-and-resumed folder and the reference (empty: equal bit for bit)."""
    problems: list[str] = []
    a, b = state(got), state(ref)
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            problems.append(f"{key} differs{_first_difference(a.get(key), b.get(key))}")
    if "steps" in a and len(set(a["steps"])) != len(a["steps"]):
        problems.append(f"metrics.jsonl repeats a step: {a['steps']}")
    run_dirs = [p.parent for p in sorted(ref.rglob("checkpoints"))] if checkpoints else []
    for ref_run in run_dirs:
        got_run = got / ref_run.relative_to(ref)
        common = sorted(set(checkpoint_steps(got_run)) & set(checkpoint_steps(ref_run)))
        if not common or common[-1] != checkpoint_steps(ref_run)[-1]:
            problems.append(f"{got_run}: final checkpoint missing (has {checkpoint_steps(got_run)})")
        for step in common:
            x = _checkpoint_arrays(got_run / "checkpoints" / "actor" / str(step))
            y = _reference_arrays(ref_run / "checkpoints" / "actor" / str(step))
            if x != y:
                bad = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                problems.append(f"{got_run.name} checkpoint {step}: {len(bad)} arrays differ, e.g. {bad[:3]}")
    return problems


def _first_difference(a: Any, b: Any) -> str:
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f" ({len(a)} vs {len(b)} entries)"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return f" at [{i}]{_first_difference(x, y)}"
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return f" at {k!r}: {str(a.get(k))[:80]} vs {str(b.get(k))[:80]}"
    return f": {str(a)[:80]} vs {str(b)[:80]}"


def temp_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if TEMP_NAME.search(p.name))


def tagged_processes(tag: str, grace_s: float = 10.0) -> list[str]:
    """Processes whose environment carries `tag` (children of a command started with it), after up to `grace_s`
    for the dying ones to go: each as 'pid name'."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = []
        for p in psutil.process_iter(["pid", "name", "status"]):
            try:
                if p.info["status"] != psutil.STATUS_ZOMBIE and p.environ().get(TAG) == tag:
                    alive.append(f"{p.pid} {p.info['name']}")
            except (psutil.Error, OSError):
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.25)


# ---- the kill engine ---------------------------------------------------------------------------------------------


def start(workload: Workload, target: Path, tag: str, log: Path) -> subprocess.Popen:
    env = rlexp_env({**os.environ, **workload.env, TAG: tag})
    env.pop("HYDRA_FULL_ERROR", None)
    with open(log, "ab") as out:
        return subprocess.Popen(
            rlexp_command(*workload.args(target), module=workload.module),
            cwd=target.parent, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's children that have ended (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _wait_cpu(proc: subprocess.Popen, cpu_s: float, timeout: float) -> int | None:
    """`proc`'s exit status once it ends, or None once it has used `cpu_s` CPU seconds (with its ended children's)
    still running."""
    deadline = time.monotonic() + timeout
    while True:
        status = proc.poll()
        if status is not None:
            return status
        try:
            t = psutil.Process(proc.pid).cpu_times()
            if t.user + t.system + t.children_user + t.children_system >= cpu_s:
                return None
        except psutil.Error:
            pass  # it is ending: the next poll says how
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.02)


def timed_reference(workload: Workload, target: Path, timeout: float = 900) -> float:
    """Run `workload` into `target` uninterrupted; its CPU time (seconds, with its children's)."""
    if workload.prepare:
        workload.prepare(target)
    began = _children_cpu_s()
    proc = start(workload, target, uuid.uuid4().hex, target.parent / f"{target.name}.log")
    status = proc.wait(timeout=timeout)
    assert status == 0, (target.parent / f"{target.name}.log").read_text()[-3000:]
    return _children_cpu_s() - began


def chain(
    workload: Workload,
    target: Path,
    reference: Path,
    duration_s: float,
    rng: random.Random,
    budget: int,
    timeout: float = 900,
    on_kill: Callable[[Kill], None] | None = None,
) -> ChainResult:
    """Kill `workload` at random moments (SIGKILL or SIGTERM once an attempt has used a CPU time drawn in
    [0, `duration_s`]: what a whole run uses) and resume it with the same command until it completes, at most
    `budget` kills; then compare `target` with `reference`. A moment past an attempt's end (a resume uses less than
    a whole run) ends the chain."""
    if workload.prepare:
        workload.prepare(target)
    began, kills, problems, fresh_s = time.monotonic(), [], [], None
    log = target.parent / f"{target.name}.log"
    for attempt in range(budget + 50):
        tag = uuid.uuid4().hex
        started = _children_cpu_s()
        proc = start(workload, target, tag, log)
        if len(kills) < budget:
            at = rng.uniform(0.0, duration_s)
            sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
            status = _wait_cpu(proc, at, timeout)
            if status is None:
                proc.send_signal(sig)
                status = proc.wait(timeout=timeout)
                kill = Kill(workload.name, attempt, round(at, 2), sig.name, status)
                kills.append(kill)
                if on_kill:
                    on_kill(kill)
                if sig == signal.SIGTERM and status not in (0, 1, -15, 143):
                    problems.append(f"SIGTERM at {at:.2f} CPU-s of attempt {attempt}: exit {status}")
                leaked = tagged_processes(tag)
                if leaked:
                    problems.append(f"{sig.name} at {at:.2f} CPU-s of attempt {attempt} left running: {leaked}")
                    for entry in leaked:
                        _kill_quietly(int(entry.split()[0]))
                continue
        else:
            status = proc.wait(timeout=timeout)
        if attempt == 0 and status == 0:
            fresh_s = _children_cpu_s() - started
        leaked = tagged_processes(tag)
        if leaked:
            problems.append(f"a completed attempt {attempt} left running: {leaked}")
        if status != 0:
            problems.append(f"attempt {attempt} (after {len(kills)} kills) exited {status}; see {log}")
        break
    leftovers = temp_files(target)
    if leftovers:
        problems.append(f"temp files left: {leftovers[:5]}")
    if not problems:
        problems = compare_runs(target, reference, workload.state or run_state, workload.checkpoints)
    return ChainResult(workload.name, kills, not problems, problems, time.monotonic() - began, fresh_s)


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class Campaign:
    chains: list[ChainResult] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return sum(len(c.kills) for c in self.chains)

    @property
    def equal_resumes(self) -> int:
        return sum(1 for c in self.chains if c.equal)

    def figures(self) -> dict[str, int]:
        """The counts `line` prints, for a summary over several campaigns (tests/e2e/conftest.py)."""
        return {
            "kills": self.kills,
            "sigkill": sum(k.sig == "SIGKILL" for c in self.chains for k in c.kills),
            "chains": len(self.chains),
            "equal": self.equal_resumes,
        }

    def line(self) -> str:
        return figures_line(self.figures())


def figures_line(f: dict[str, int]) -> str:
    """`random kills: K (a SIGKILL, b SIGTERM) over C chains; equal resumes: E/C` of `Campaign.figures`."""
    return (
        f"random kills: {f['kills']} ({f['sigkill']} SIGKILL, {f['kills'] - f['sigkill']} SIGTERM) over "
        f"{f['chains']} chains; equal resumes: {f['equal']}/{f['chains']}"
    )


def campaign(
    workloads: Sequence[Workload],
    root: Path,
    kills: int,
    seed: int,
    budget: int = 8,
    say: Callable[[str], None] = print,
) -> Campaign:
    """Each workload's reference once, then chains round-robin over the workloads (fresh folders) until at least
    `kills` kills have landed; every chain is compared with its workload's reference. Moments are drawn over the
    reference's time, or over a whole run's since (a chain's first attempt that completed before its moment: the
    reference filled the compilation cache, later runs read it)."""
    rng = random.Random(seed)
    refs: dict[str, tuple[Path, float]] = {}
    for w in workloads:
        (root / w.name).mkdir(parents=True, exist_ok=True)
        ref = root / w.name / "reference"
        refs[w.name] = (ref, timed_reference(w, ref))
        say(f"{w.name}: reference {refs[w.name][1]:.1f} CPU-s")
    out = Campaign()
    i = 0
    while out.kills < kills:
        w = workloads[i % len(workloads)]
        ref, duration = refs[w.name]
        target = root / w.name / f"chain{i}"
        want = min(budget, kills - out.kills)
        result = chain(w, target, ref, duration, rng, want)
        out.chains.append(result)
        moments = ", ".join(f"{k.sig[3:]}@{k.at_s}s" for k in result.kills)
        say(f"{w.name} chain {i}: {len(result.kills)} kills [{moments}] -> {'equal' if result.equal else 'DIFFERENT'}"
            f" ({result.seconds:.0f} s){'' if result.equal else ': ' + '; '.join(result.problems)}")  # fmt: skip
        if result.equal:
            shutil.rmtree(target, ignore_errors=True)
        if result.fresh_s is not None:  # a whole run took less than the reference (which compiled): draw from that
            refs[w.name] = (ref, min(duration, result.fresh_s))
        i += 1
    return out


# ---- the workloads -----------------------------------------------------------------------------------------------

TINY = ["trainer.max_steps=4", "trainer.eval_every=2", "trainer.checkpoint_every=2", "trainer.eval_prompts=8",
        "trainer.eval_samples=1", "trainer.samples_every=2"]  # fmt: skip
# the judge's and the tool demo's (64 episodes a step: 8; the judge: 8 calls a step): the shapes of
# tests/e2e/test_dependency_dies.py's runs, which run the default and the tool demo too (one compile for both)
SMALL_BATCH = ["trainer.batch_size=2", "trainer.num_generations=4", "trainer.eval_prompts=4"]
JUDGE = "reward.functions.0.kwargs"


def sweep_args(target: Path) -> list[str]:
    """A 3-job sweep; once its sweep.json exists, the command its stop line asks for: the same with
    sweep.resume=true (without sweep.json there is nothing to resume: the same command again)."""
    resume = ["sweep.resume=true"] if (target / "sweep.json").exists() else []
    return ["-m", "seed=1,2,3", *TINY, "trainer.max_steps=4", "logger=none", *resume, f"hydra.sweep.dir={target}"]


def sweep_state(sweep_dir: Path) -> dict[str, Any]:
    """Each job's run_state, and sweep.json's jobs (number, overrides, state, objective; `sweep.resume=true`, which
    the resumed invocation adds to its jobs' overrides, left out)."""
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    jobs = [{k: j.get(k) for k in ("num", "state", "objective")} for j in manifest["jobs"]]
    for job, record in zip(jobs, manifest["jobs"], strict=True):  # the resume's own flag aside
        job["overrides"] = [o for o in record.get("overrides", []) if not o.startswith("sweep.resume=")]
    out: dict[str, Any] = {"sweep_state": manifest.get("state"), "jobs": _clean(jobs)}
    for job in sorted(p for p in sweep_dir.iterdir() if p.name.isdigit()):
        out.update({f"{job.name}/{k}": v for k, v in run_state(job).items()})
    return out


def eval_state(run_dir: Path) -> dict[str, Any]:
    """`rlexp eval`'s result files in the run dir's eval/ folder."""
    records = {p.name: _clean(json.loads(p.read_text())) for p in sorted((run_dir / "eval").glob("*.json"))}
    for record in records.values():
        record.pop("target", None)  # the run dir it evaluated: each chain's own folder
    return records


def workloads(root: Path, judge_url: str) -> list[Workload]:
    """The five workloads of issue 42: the default run (TensorBoard: the tracker's child and its flush), reward=judge
    against `judge_url`, the tool demo, a 3-job sweep and `rlexp eval` of the default run's reference."""
    trained = root / "default" / "reference"

    def copy_trained(target: Path) -> None:
        shutil.copytree(trained, target, ignore=shutil.ignore_patterns("eval", "tb", "tensorboard"))

    judge = [f"{JUDGE}.base_url={judge_url}", f"{JUDGE}.model=m", f"{JUDGE}.timeout_s=30", f"{JUDGE}.retries=0"]
    return [
        Workload("default", lambda t: [*TINY, "logger=tensorboard", f"hydra.run.dir={t}"]),
        Workload("judge", lambda t: ["reward=judge", *judge, *TINY, *SMALL_BATCH, "logger=none", f"hydra.run.dir={t}"]),
        Workload(
            "tools", lambda t: ["experiment=tools_demo", *TINY, *SMALL_BATCH, "logger=none", f"hydra.run.dir={t}"]
        ),
        Workload("sweep", sweep_args, state=sweep_state),
        Workload(
            "eval",
            lambda t: ["eval", str(t), "--name", "kills"],
            module="rlexp.console",
            prepare=copy_trained,
            state=eval_state,
            checkpoints=False,
        ),  # fmt: skip
    ]
