"""Steps per second of synchronous against asynchronous training (`trainer.off_policy.max_staleness`) on the
2-device CPU slice: one device trains, the other samples (`slice.rollout_devices=1`), alternating runs in one
invocation.

    python benchmarks/bench_async.py [--rounds 3] [--staleness 1] [--reward-latency-ms 0] [-- overrides...]

Each round runs `python -m rlexp` once with max_staleness=0 (sync: the rollout devices sample, then the trainer
updates) and once with max_staleness=k (async: a thread samples the next batches while the trainer updates), in
turn, each a fresh process on a warm compile cache (one untimed run per side fills it first). It prints each run's
median steady step (perf/step_time_sec after the first 5 steps), steps per second, the training wall time and
pass@1 before -> after (equal learning: the async run must learn as the sync one does), then the medians and the
ratio async/sync of steps per second, with the CPU and the load around the runs (benchmarks/machine.py).

`--reward-latency-ms N` scores through `reward=http` against the reference reward service on loopback
(rlexp.rewards.server, the arith grader) answering each request N ms late, as a remote judge or sandbox farm
would: sync, the step waits for it; async, the rollout thread does, while the trainer updates.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py: the CPU and the load the figures hold for)
from bench_default_run import ROOT, run_once  # noqa: E402  (one run of `python -m rlexp`, timed)

SLICE = ["slice=cpu", "slice.devices=2", "slice.rollout_devices=1"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--staleness", type=int, default=1, help="the async side's trainer.off_policy.max_staleness")
    ap.add_argument("--reward-latency-ms", type=float, default=0.0, help="score over http, answers this late")
    ap.add_argument("overrides", nargs="*", help="config overrides for both sides (default: the default run)")
    args = ap.parse_args()
    sides = {
        "sync": ["trainer.off_policy.max_staleness=0"],
        "async": [f"trainer.off_policy.max_staleness={args.staleness}"],
    }
    server = None
    if args.reward_latency_ms > 0:
        from rlexp.rewards.server import start_server

        server = start_server(reward="arith_correct", latency_s=args.reward_latency_ms / 1e3)
        args.overrides = ["reward=http", f"reward.functions.0.kwargs.url={server.url}", *args.overrides]
    print(machine.header())
    print(f"slice: {' '.join(SLICE)}; async: max_staleness={args.staleness}; overrides: {' '.join(args.overrides)}")
    watch = machine.LoadWatch()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="bench_async-") as tmp:
        cache = Path(tmp) / "cache"
        for name, extra in sides.items():  # fills the shared compile cache for both sides
            run_once(ROOT, cache, Path(tmp) / f"warm-{name}", [*SLICE, *extra, "logger=none", *args.overrides])
        for r in range(args.rounds):
            for name, extra in sides.items() if r % 2 == 0 else reversed(list(sides.items())):
                res = run_once(ROOT, cache, Path(tmp) / f"{name}-{r}", [*SLICE, *extra, "logger=none", *args.overrides])
                results[name].append(res)
                print(
                    f"round {r + 1} {name:<5}: step {res['step_ms']:.1f} ms ({1e3 / res['step_ms']:.1f} steps/s), "
                    f"train wall {res['train_wall_s']:.1f} s, pass@1 {res['pass_before']:.3f} -> {res['pass_after']:.3f}",
                    flush=True,
                )
    med = {name: statistics.median(x["step_ms"] for x in rs) for name, rs in results.items()}
    wall = {name: statistics.median(x["train_wall_s"] for x in rs) for name, rs in results.items()}
    for name in sides:
        print(
            f"median {name:<5}: step {med[name]:.1f} ms = {1e3 / med[name]:.1f} steps/s, train wall {wall[name]:.1f} s"
        )
    print(
        f"steps/s async/sync: {med['sync'] / med['async']:.3f}; train wall sync/async: {wall['sync'] / wall['async']:.3f}"
    )
    print(watch.report())
    if server is not None:
        print(f"reward service: {server.stats['items']} items scored, each request {args.reward_latency_ms:g} ms late")
        server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
