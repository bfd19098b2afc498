"""`python -m rlexp.report <sweep dir | run dirs…> [--out report.html] [--wandb]`."""

from __future__ import annotations

import argparse
import logging
import sys

from rlexp import cli, storage
from rlexp.config.values import SUMMARY_NUMBERS
from rlexp.errors import ArgumentParser, RlexpError
from rlexp.report.build import default_out, write_sweep
from rlexp.report.load import load

log = logging.getLogger("rlexp.report")  # by name: run as __main__ by python -m


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rlexp.report", description=__doc__)
    parser.add_argument("inputs", nargs="+", help="a sweep dir (local or gs://…) or several run dirs")
    parser.add_argument("--out", help="HTML file to write (default: <sweep dir>/report.html or ./report.html)")
    parser.add_argument("--objective", help="summary.json key that ranks runs (default: the sweep's objective)")
    parser.add_argument("--wandb", action="store_true", help="also build a wandb Report for the sweep's group")
    parser.add_argument("--entity", help="wandb entity for --wandb (default: the sweep's logger.entity)")
    parser.add_argument("--project", help="wandb project for --wandb (default: the sweep's logger.project)")
    args = parser.parse_args(argv)
    return cli.command(lambda: _report(args))


def _numbers(tree: object, prefix: str = "") -> set[str]:
    """Dotted keys of the numbers in a summary.json."""
    if isinstance(tree, dict):
        return {k for key, v in tree.items() for k in _numbers(v, f"{prefix}{key}.")}
    return {prefix[:-1]} if isinstance(tree, int | float) and not isinstance(tree, bool) else set()


def _report(args: argparse.Namespace) -> int:
    missing = [p for p in args.inputs if not storage.exists(p)]
    if missing:
        raise RlexpError(f"{missing[0]}: no such run or sweep dir; give a sweep dir or run dirs that exist")
    sweep = load(args.inputs, objective=args.objective)
    log.debug("report: %d runs from %s, ranked by %s", len(sweep.runs), sweep.source, sweep.objective)
    if not sweep.runs:
        raise RlexpError(f"{', '.join(args.inputs)}: no runs found (run dirs hold metrics.jsonl); give a sweep dir")
    if args.objective:  # a key no run has would rank nothing, silently
        found = set().union(*(_numbers(r.summary) for r in sweep.runs))
        if args.objective not in found | set(SUMMARY_NUMBERS):
            choices = ", ".join(sorted(found & set(SUMMARY_NUMBERS)) or SUMMARY_NUMBERS)
            raise RlexpError(
                f"--objective={args.objective}: no run's summary.json has this number; use one of {choices}"
            )
    out = write_sweep(sweep, args.out or default_out(args.inputs))
    log.info("report: %s (%d runs)", out, len(sweep.runs))
    if args.wandb:
        from rlexp.report.wandb_report import publish

        project = args.project or sweep.wandb.get("project") or "rlexp"
        print(publish(sweep, entity=args.entity or sweep.wandb.get("entity"), project=project))  # its URL: the output
    return 0


if __name__ == "__main__":
    sys.exit(main())
