"""Time the command a user types for a dry-run sweep, end to end, at 1, 100 and 1,000 jobs; prints per-job costs.

    python benchmarks/bench_sweep_cli.py [--rounds 3] [--no-baseline]

Each run is a fresh process in an empty working dir:

    python -m rlexp -m model=gemma4_e4b slice=v6e-32 hydra.launcher.dry_run=true 'seed=range(0,N)'

(start-up, Hydra's composition, the sweeper's batch validation, the GKE launcher's checks, manifests and files,
the sweep table and report.html). Sizes alternate within each round. Each size reports its fastest round (the one
least slowed by other processes on a shared machine) with the median in brackets. The per-job cost is the time a
run takes beyond the 1-job run, divided by the jobs beyond the first: linear when it is the same at 100 and 1,000
jobs (goal: within 20 %, and 1,000 jobs in <= 20 s on 2 cores). The baseline runs 100 jobs with Hydra's own basic
sweeper (`hydra/sweeper=basic`), which composes every job in full to validate the batch, side by side with rlexp's.

The filesystem floor runs beside each command: the same directories and bytes that run wrote, written again by a
plain Python loop into the same filesystem. File creation is not linear on every disk (on an ext4 virtual disk,
measured: 1.0 ms per job's 5 files and 2 dirs at 100 jobs, 5 ms at 1,000; 0.08 ms at both on tmpfs), so the
linearity of rlexp's own work is read on wall time in a working dir on tmpfs (`--workdir /dev/shm`). On such a
disk even user CPU per job grew (1.43x from 100 to 1,000 jobs, where tmpfs gave 0.86x): the kernel's file work
disturbs the process beyond its sys time. `--workdir` picks the filesystem (default: the system's temporary
directory, on the disk a user's runs go to).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py: the CPU and the load the figures hold for)

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "rlexp", "-m", "model=gemma4_e4b", "slice=v6e-32", "hydra.launcher.dry_run=true"]


class Timing(NamedTuple):
    wall: float  # the command, seconds
    user: float  # its user CPU seconds: rlexp's own work, whatever the filesystem
    sys: float  # its system CPU seconds: mostly creating files and dirs
    floor: float  # writing the same dirs and bytes with a plain loop, seconds


def run(jobs: int, *extra: str, workdir: str | None = None) -> Timing:
    """One dry-run sweep of `jobs` jobs in a fresh process and an empty working dir, and its filesystem floor."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RLEXP_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "launchers"), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory(dir=workdir) as cwd:
        cmd = [sys.executable, *COMMAND, f"seed=range(0,{jobs})", *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        written = len(list(Path(cwd).glob("multirun/*/*/*/jobset.yaml")))
        if written != jobs:
            raise SystemExit(f"{jobs} jobs: {written} jobset.yaml written")
        tree = _snapshot(Path(cwd))
    with tempfile.TemporaryDirectory(dir=workdir) as out:
        floor = _rewrite(tree, Path(out))
    return Timing(seconds, user, system, floor)


def _snapshot(root: Path) -> tuple[list[Path], list[tuple[Path, bytes]]]:
    """Every directory (parents first) and file the run wrote, relative to its working dir, with the files' bytes."""
    dirs, files = [], []
    for here, subdirs, names in os.walk(root):
        base = Path(here).relative_to(root)
        dirs += [base / d for d in sorted(subdirs)]
        files += [(base / n, (Path(here) / n).read_bytes()) for n in names]
    return dirs, files


def _rewrite(tree: tuple[list[Path], list[tuple[Path, bytes]]], into: Path) -> float:
    """Seconds to create the same dirs and files under `into` with nothing else: what the filesystem alone costs."""
    dirs, files = tree
    t0 = time.perf_counter()
    for d in dirs:
        (into / d).mkdir()
    for name, data in files:
        (into / name).write_bytes(data)
    return time.perf_counter() - t0


def _per_job(seconds: dict[int, float]) -> dict[int, float]:
    """Seconds per job beyond the smallest run (its start-up and one-off checks), for every larger size."""
    first = min(seconds)
    return {n: (t - seconds[first]) / (n - first) for n, t in seconds.items() if n != first}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000])
    ap.add_argument("--workdir", help="filesystem to run in (default: the system's temporary directory)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the 100-job run with Hydra's basic sweeper")
    a = ap.parse_args()
    print(machine.header())
    watch = machine.LoadWatch()
    times: dict[int, list[Timing]] = {n: [] for n in a.sizes}
    for r in range(a.rounds):
        for n in a.sizes if r % 2 == 0 else reversed(a.sizes):
            t = run(n, workdir=a.workdir)
            times[n].append(t)
            print(
                f"round {r + 1}: {n:>5} jobs {t.wall:7.2f} s wall, {t.user:6.2f} s user, {t.sys:6.2f} s sys, "
                f"filesystem floor {t.floor:6.2f} s",
                file=sys.stderr,
            )
    fastest = {k: {n: min(getattr(t, k) for t in ts) for n, ts in times.items()} for k in Timing._fields}
    median = {n: statistics.median(t.wall for t in ts) for n, ts in times.items()}
    per_job = {k: _per_job(v) for k, v in fastest.items()}
    wall, first = fastest["wall"], min(fastest["wall"])
    where = a.workdir or tempfile.gettempdir()
    print(f"dry-run sweep through the CLI in {where}, fastest of {a.rounds} rounds [median], fresh process each:")
    for n in sorted(wall):
        line = (
            f"{n:>5} jobs: {wall[n]:6.2f} s wall [{median[n]:6.2f}] ({wall[n] / n * 1e3:6.1f} ms/job), "
            f"{fastest['user'][n]:5.2f} s user, {fastest['sys'][n]:5.2f} s sys, filesystem floor {fastest['floor'][n]:5.2f} s"
        )
        if n != first:
            line += f"; per job beyond the {first}-job run, ms: " + ", ".join(
                f"{per_job[k][n] * 1e3:.2f} {k}" for k in Timing._fields
            )
        print(line)
    sizes = sorted(per_job["wall"])
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        print(
            f"per-job cost {large}/{small} jobs (linear: 1.00 +- 0.20): "
            + ", ".join(f"{per_job[k][large] / per_job[k][small]:.2f} {k}" for k in Timing._fields)
        )
    if not a.no_baseline and 100 in wall:
        hydra = run(100, "hydra/sweeper=basic", workdir=a.workdir)
        print(
            f"100 jobs with Hydra's basic sweeper: {hydra.wall:6.2f} s wall, {hydra.user:6.2f} s user; "
            f"rlexp's sweeper: {wall[100]:.2f} s wall, {fastest['user'][100]:.2f} s user "
            f"({hydra.wall / wall[100]:.1f}x wall)"
        )
    print(watch.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
