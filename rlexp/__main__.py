"""`python -m rlexp`: train with the composed config; `--help` lists groups and options."""

import sys


def entry() -> None:
    args = sys.argv[1:]
    if any(a in ("--help", "-h") for a in args):
        from rlexp.cli_help import print_help

        print_help()
        return
    from rlexp import cli
    from rlexp.main import main

    try:
        cli.run(main)
    finally:
        if any(a in ("--cfg", "-c") for a in args) and "-m" not in args and "--multirun" not in args:
            from rlexp.cli_help import print_memory_estimate

            print_memory_estimate(args)


if __name__ == "__main__":
    entry()
