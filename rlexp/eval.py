"""`python -m rlexp.eval <run dir | run dir step | Hugging Face folder> [overrides] [--out PATH]`: evaluate a checkpoint.

The run's newest checkpoint, a chosen step, or an exported folder, on the eval split of the run's dataset or of
any dataset option (`dataset=gsm8k`), with the run's templates and rewards; writes `eval/<name>.json` into the
run dir (or --out) and prints the metrics (rlexp.train.offline_eval, docs/eval.md).
"""

from __future__ import annotations

import logging
import sys

from rlexp import cli
from rlexp.errors import ArgumentParser

log = logging.getLogger("rlexp.eval")  # by name: run as __main__ by python -m


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rlexp.eval", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="run dir, <run dir>/checkpoints/actor/<step>, or a Hugging Face folder")
    parser.add_argument("rest", nargs="*", help="a step of the run, then overrides: group=option or a.b=value")
    parser.add_argument("--out", help="a .json file or a folder to write <name>.json into (default: <run>/eval)")
    parser.add_argument("--name", help="the result's name (default: <dataset>-step<N> or <dataset>-<folder>)")
    args = parser.parse_args(argv)
    step = int(args.rest[0]) if args.rest and args.rest[0].isdigit() else None
    overrides = args.rest[1:] if step is not None else args.rest

    def run() -> int:
        from rlexp.train.offline_eval import run_offline_eval

        path, record = run_offline_eval(args.target, step, overrides, args.out, args.name)
        shown = "  ".join(f"{k} {v:.4g}" for k, v in record["metrics"].items())
        print(f"rlexp eval {record['name']} (step {record['step']}): {shown}")
        print(f"rlexp: wrote {path}")
        return 0

    return cli.command(run)


if __name__ == "__main__":
    sys.exit(main())
