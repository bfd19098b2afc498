"""The sandbox's cost per step: the default run with `reward=code` (an arith-grading snippet under bubblewrap)
against the default run with the in-process reward (`reward=arith`), alternated side by side.

    python benchmarks/bench_sandbox.py [--rounds 2] [--dry] [-- overrides...]

Each run is `python -m rlexp` as the user types it (one warm JAX compile cache shared by both sides, after one
untimed warm-up run per side). Printed: the CPU model and flags, per run the process wall and the median steady
step (`perf/step_time_sec` from metrics.jsonl after step 5), the medians' differences (the sandbox's cost per
step and per run) and their ratios, the step's against the goal of 1.5x. The sandbox keeps a warm worker for the
run (rlexp.rewards.sandbox), so what remains per step is one fork per call and a few per batch, plus the JSON
both ways. `--dry` prints the two commands and exits.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (the CPU and the load the figures hold for)
from bench_default_run import ROOT, run_once  # noqa: E402

# the completion's leading integer against the row's answer, like reward=arith's first term
SNIPPET = (
    'def evaluate(example, response): import re; m = re.match(r"\\s*(-?\\d+)", response["text"]); '
    'return float(bool(m) and int(m.group(1)) == int(example["answer"]))'
)
GOAL = 1.5  # issue 44: the sandbox's step within 1.5x of the in-process reward's
SIDES = {
    "in_process": ["reward=arith", "logger=none"],
    "sandbox": ["reward=code", f"reward.functions.0.kwargs.snippet='{SNIPPET}'", "logger=none"],
}


def cpu_info() -> str:
    """The CPU, the load before the runs, and the first CPU's `flags` in /proc/cpuinfo."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return f"{machine.header()}\nflags: {info.get('flags', '?')}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dry", action="store_true", help="print the commands, run nothing")
    ap.add_argument("overrides", nargs="*", help="config overrides for both sides (default: none)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(cpu_info())
    for side, over in SIDES.items():
        print(f"{side}: python -m rlexp {' '.join(over + args.overrides)}")
    if args.dry:
        return 0
    watch = machine.LoadWatch()
    results: dict[str, list[dict[str, float]]] = {s: [] for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="rlexp-bench-sandbox-") as tmp:
        cache = Path(tmp) / "cache"
        for r in range(args.rounds + 1):  # round 0 warms the compile cache and is not counted
            for side, over in SIDES.items():
                m = run_once(ROOT, cache, Path(tmp) / f"{side}-{r}", over + args.overrides)
                print(f"round {r} {side:10}: wall {m['wall_s']:6.2f} s  step {m['step_ms']:6.1f} ms  "
                      f"pass@1 {m['pass_before']:.2f} -> {m['pass_after']:.2f}" + ("  (warm-up)" if r == 0 else ""),
                      flush=True)  # fmt: skip
                if r:
                    results[side].append(m)
    med = {s: {k: statistics.median(m[k] for m in ms) for k in ("wall_s", "step_ms")} for s, ms in results.items()}
    step = med["sandbox"]["step_ms"] - med["in_process"]["step_ms"]
    wall = med["sandbox"]["wall_s"] - med["in_process"]["wall_s"]
    print(f"median step: in-process {med['in_process']['step_ms']:.1f} ms, sandbox {med['sandbox']['step_ms']:.1f} ms")
    print(f"sandbox cost: {step:+.1f} ms per step, {wall:+.2f} s per run (process wall)")
    ratio = med["sandbox"]["step_ms"] / med["in_process"]["step_ms"]
    print(f"ratio sandbox/in-process step: {ratio:.2f} (goal <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'})")
    print(f"ratio sandbox/in-process process wall: {med['sandbox']['wall_s'] / med['in_process']['wall_s']:.2f}")
    print(watch.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
