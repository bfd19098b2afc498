"""`python -m rlexp.report <sweep dir | run dirs…> [--out report.html] [--wandb]`."""

from __future__ import annotations

import argparse
import sys

from rlexp import cli, storage
from rlexp.errors import RlexpError
from rlexp.report.build import default_out, write_sweep
from rlexp.report.load import load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlexp.report", description=__doc__)
    parser.add_argument("inputs", nargs="+", help="a sweep dir (local or gs://…) or several run dirs")
    parser.add_argument("--out", help="HTML file to write (default: <sweep dir>/report.html or ./report.html)")
    parser.add_argument("--objective", help="summary.json key that ranks runs (default: the sweep's objective)")
    parser.add_argument("--wandb", action="store_true", help="also build a wandb Report for the sweep's group")
    parser.add_argument("--entity", help="wandb entity for --wandb (default: the sweep's logger.entity)")
    parser.add_argument("--project", help="wandb project for --wandb (default: the sweep's logger.project)")
    args = parser.parse_args(argv)
    return cli.command(lambda: _report(args))


def _report(args: argparse.Namespace) -> int:
    missing = [p for p in args.inputs if not storage.exists(p)]
    if missing:
        raise RlexpError(f"no such run or sweep dir: {', '.join(missing)}")
    sweep = load(args.inputs, objective=args.objective)
    if not sweep.runs:
        raise RlexpError(f"no runs found in {', '.join(args.inputs)} (expected run dirs with metrics.jsonl)")
    out = write_sweep(sweep, args.out or default_out(args.inputs))
    print(f"report: {out} ({len(sweep.runs)} runs)")
    if args.wandb:
        from rlexp.report.wandb_report import publish

        project = args.project or sweep.wandb.get("project") or "rlexp"
        print(publish(sweep, entity=args.entity or sweep.wandb.get("entity"), project=project))
    return 0


if __name__ == "__main__":
    sys.exit(main())
