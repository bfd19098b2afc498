"""`python -m rlexp`: train with the composed config; `--help` lists groups and options."""

import sys


def _entry() -> None:
    args = sys.argv[1:]
    if any(a in ("--help", "-h") for a in args):
        from rlexp.cli_help import print_help

        print_help()
        return
    from rlexp.cli_errors import install
    from rlexp.main import main

    install()  # one-line messages for unknown options, keys and wrong types
    try:
        main()
    finally:
        if any(a in ("--cfg", "-c") for a in args) and "-m" not in args and "--multirun" not in args:
            from rlexp.cli_help import print_memory_estimate

            print_memory_estimate(args)


if __name__ == "__main__":
    _entry()
