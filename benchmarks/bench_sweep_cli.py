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

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "rlexp", "-m", "model=gemma4_e4b", "slice=v6e-32", "hydra.launcher.dry_run=true"]


def run(jobs: int, *extra: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one dry-run sweep of `jobs` jobs in a fresh process and an empty working dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RLEXP_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "launchers"), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as cwd:
        cmd = [sys.executable, *COMMAND, f"seed=range(0,{jobs})", *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        written = len(list(Path(cwd).glob("multirun/*/*/*/jobset.yaml")))
        if written != jobs:
            raise SystemExit(f"{jobs} jobs: {written} jobset.yaml written")
    return seconds, cpu


def _per_job(seconds: dict[int, float]) -> dict[int, float]:
    """Seconds per job beyond the smallest run (its start-up and one-off checks), for every larger size."""
    first = min(seconds)
    return {n: (t - seconds[first]) / (n - first) for n, t in seconds.items() if n != first}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000])
    ap.add_argument("--no-baseline", action="store_true", help="skip the 100-job run with Hydra's basic sweeper")
    a = ap.parse_args()
    times: dict[int, list[tuple[float, float]]] = {n: [] for n in a.sizes}
    for r in range(a.rounds):
        for n in a.sizes if r % 2 == 0 else reversed(a.sizes):
            times[n].append(run(n))
            print(
                f"round {r + 1}: {n:>5} jobs {times[n][-1][0]:7.2f} s wall, {times[n][-1][1]:6.2f} s CPU",
                file=sys.stderr,
            )
    wall = {n: min(t[0] for t in ts) for n, ts in times.items()}
    cpu = {n: min(t[1] for t in ts) for n, ts in times.items()}
    median = {n: statistics.median(t[0] for t in ts) for n, ts in times.items()}
    per_wall, per_cpu = _per_job(wall), _per_job(cpu)
    first = min(wall)
    print(
        f"dry-run sweep through the CLI, fastest of {a.rounds} rounds [median], fresh process each (CPU: user + sys):"
    )
    for n in sorted(wall):
        line = f"{n:>5} jobs: {wall[n]:6.2f} s wall [{median[n]:6.2f}] ({wall[n] / n * 1e3:7.1f} ms/job), {cpu[n]:6.2f} s CPU"
        if n in per_wall:
            line += f"; per job beyond the {first}-job run: {per_wall[n] * 1e3:5.1f} ms wall, {per_cpu[n] * 1e3:5.1f} ms CPU"
        print(line)
    if len(per_wall) >= 2:
        small, large = min(per_wall), max(per_wall)
        print(
            f"per-job cost {large}/{small} jobs: {per_wall[large] / per_wall[small]:.2f} wall, "
            f"{per_cpu[large] / per_cpu[small]:.2f} CPU (linear: 1.00 +- 0.20)"
        )
    if not a.no_baseline and 100 in wall:
        hydra, hydra_cpu = run(100, "hydra/sweeper=basic")
        print(
            f"100 jobs with Hydra's basic sweeper: {hydra:6.2f} s wall, {hydra_cpu:6.2f} s CPU; "
            f"rlexp's sweeper: {wall[100]:.2f} s wall, {cpu[100]:.2f} s CPU ({hydra / wall[100]:.1f}x wall)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
