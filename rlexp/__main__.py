"""`python -m rlexp`: train with the composed config; `--help` lists groups and options."""

import sys


def _entry() -> None:
    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        from rlexp.cli_help import print_help

        print_help()
        return
    from rlexp.main import main

    main()


if __name__ == "__main__":
    _entry()
