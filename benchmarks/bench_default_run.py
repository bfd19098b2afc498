"""Time `python -m rlexp` (the embedded default: 300 GRPO steps, four evals) as a user runs it, cold and warm,
side by side with a baseline commit.

    python benchmarks/bench_default_run.py [--rounds 2] [--baseline REV] [--no-cold] [-- overrides...]

Cold: a fresh, empty JAX compile cache (`compile_cache.dir`), as on a fresh clone. Warm: the same cache again.
Each run is a fresh process with its own run dir and the user's default config (wandb offline: WANDB_* is
cleared); it reports process wall, CPU (user + sys), peak RSS, the median steady step (perf/step_time_sec
after the first 5 steps) and the run's pass@1 before -> after. With `--baseline REV`, that commit is checked
out in a temporary worktree and run alternately with this checkout (same interpreter and packages), and the
medians are printed with baseline/current ratios (> 1: this checkout is faster or leaner). Goals:
<= 40 s cold, <= 25 s warm on 2 cores, pass@1 gain >= +0.20.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py: the CPU and the load the figures hold for)

ROOT = Path(__file__).resolve().parent.parent


def run_once(checkout: Path, cache: Path, run_dir: Path, overrides: list[str]) -> dict[str, float]:
    """One `python -m rlexp` in `checkout` (its package shadows the installed one: `-m` puts the cwd first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RLEXP_", "XLA_", "JAX_"))}
    cmd = [sys.executable, "-m", "rlexp", f"hydra.run.dir={run_dir}", f"compile_cache.dir={cache}", *overrides]
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU and peak RSS
        wall = time.perf_counter() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed ({code}) in {checkout}:\n{err.read()[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    ev = summary["eval"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["perf/step_time_sec"] for r in rows if "perf/step_time_sec" in r][5:]  # first steps trace programs
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_gb": usage.ru_maxrss / 2**20,
        "train_wall_s": summary["train"]["wall_seconds"],
        "step_ms": 1e3 * statistics.median(steps) if steps else float("nan"),
        "pass_before": ev["before"]["pass_at_1"],
        "pass_after": ev["after"]["pass_at_1"],
    }


def worktree(rev: str, into: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), rev], check=True, capture_output=True
    )
    return into


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", help="a commit to run alternately with this checkout")
    ap.add_argument(
        "--no-cold", action="store_true", help="warm runs only (one untimed run per side fills its cache first)"
    )
    ap.add_argument("overrides", nargs="*", help="config overrides for every run (default: none, the user's command)")
    args = ap.parse_args()
    overrides = args.overrides
    print(machine.header())
    watch = machine.LoadWatch()
    with tempfile.TemporaryDirectory(prefix="bench_default_run-") as tmp:
        tmp = Path(tmp)
        sides = {"current": ROOT}
        if args.baseline:
            sides = {"baseline": worktree(args.baseline, tmp / "baseline"), **sides}
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        try:
            for r in range(args.rounds):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for side in order:
                    # --no-cold: one untimed run per side fills a cache that every round then reuses
                    cache = tmp / (f"cache-{side}" if args.no_cold else f"cache-{side}-{r}")
                    kinds = ["warm"] if args.no_cold else ["cold", "warm"]
                    if args.no_cold and r == 0:
                        run_once(sides[side], cache, tmp / f"fill-{side}", overrides)
                    for kind in kinds:
                        m = run_once(sides[side], cache, tmp / f"run-{side}-{r}-{kind}", overrides)
                        results.setdefault((side, kind), []).append(m)
                        print(
                            f"round {r + 1} {side:8} {kind}: wall {m['wall_s']:6.2f} s  CPU {m['cpu_s']:6.2f} s  "
                            f"RSS {m['rss_gb']:.2f} GiB  train {m['train_wall_s']:6.2f} s  step {m['step_ms']:5.1f} ms  pass@1 {m['pass_before']:.3f} -> {m['pass_after']:.3f}",
                            flush=True,
                        )
        finally:
            if args.baseline:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "baseline")])
    print("\nmedians" + (" (baseline/current > 1: current is faster)" if args.baseline else ""))
    for kind in ("cold", "warm"):
        row = {side: results.get((side, kind)) for side in sides}
        if not all(row.values()):
            continue
        med = {side: {k: statistics.median(m[k] for m in ms) for k in ms[0]} for side, ms in row.items()}
        parts = [
            f"{side} wall {m['wall_s']:.2f} s, CPU {m['cpu_s']:.2f} s, step {m['step_ms']:.1f} ms, RSS {m['rss_gb']:.2f} GiB"
            for side, m in med.items()
        ]
        ratio = ""
        if args.baseline:
            ratio = f"  ratio wall {med['baseline']['wall_s'] / med['current']['wall_s']:.3f}"
            ratio += f", CPU {med['baseline']['cpu_s'] / med['current']['cpu_s']:.3f}"
        print(f"{kind}: " + "; ".join(parts) + ratio)
    print(watch.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
