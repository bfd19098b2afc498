"""`python -m rlexp`: train with the composed config; `--help` lists groups and options."""

import sys


def _entry() -> None:
    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        from rlexp.cli_help import print_help

        print_help()
        return
    from rlexp.cli_errors import install
    from rlexp.main import main

    install()  # one-line messages for unknown options, keys and wrong types
    main()


if __name__ == "__main__":
    _entry()
