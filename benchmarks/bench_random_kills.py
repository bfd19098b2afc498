"""Random kills of the commands a user types, resumed by the same command, compared with uninterrupted runs.

    python benchmarks/bench_random_kills.py [--kills 200] [--seed 0] [--workloads default,judge,tools,sweep,eval]

The engine is tests/faults.py (the slow test tests/e2e/test_random_kills.py runs it, one test a workload, with
fixed seeds and >= 30 kills in all): each workload's uninterrupted run once, timed; then chains, round-robin over
the workloads, each killing its command (SIGKILL or SIGTERM) at a moment drawn from the seeded RNG over the
command's measured duration (a whole run's, once a chain's first attempt measured one),
resuming it by the same command, killing it again, ... until it completes (at most --budget kills a chain). Prints
every chain (its moments and whether it ended equal), then the kills and the equal resumes. A chain that ends
different prints what differs; rerun with its seed to reproduce (the moments are the seed's; the phase each
moment lands in depends on the machine's load).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py: the CPU and the load the figures hold for)

from tests.faults import campaign, excluded_keys, workloads  # noqa: E402
from tests.rewards.judge_servers import FaultServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=6, help="kills at most in one chain before it may finish")
    parser.add_argument("--workloads", default="default,judge,tools,sweep,eval")
    parser.add_argument("--workdir", default=None, help="where the runs go (default: a new temporary folder)")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "launchers"), os.environ.get("PYTHONPATH", "")])
    print(machine.header(), flush=True)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="rlexp-kills-"))
    server = FaultServer()
    names = args.workloads.split(",")
    chosen = [w for w in workloads(root, server.url("graded")) if w.name in names]
    if "eval" in names and "default" not in names:
        chosen.insert(0, workloads(root, "")[0])  # rlexp eval evaluates the default run's reference
    began = time.monotonic()
    try:
        result = campaign(chosen, root, args.kills, args.seed, budget=args.budget, say=lambda s: print(s, flush=True))
    finally:
        server.shutdown()
    print(f"seed {args.seed}: {result.line()} in {time.monotonic() - began:.0f} s ({root})")
    print("wall-clock keys left out:", ", ".join(excluded_keys(root / chosen[0].name / "reference")))
    print(f"load average after: {os.getloadavg()[0]:.2f} (1 min)", flush=True)
    return 0 if result.equal_resumes == len(result.chains) else 1


if __name__ == "__main__":
    sys.exit(main())
