"""`python -m rlexp`: train with the composed config; `--help` lists groups and options."""

import sys


def entry() -> None:
    from rlexp import cli, log_setup

    log_setup.take_level_flags()  # -q / -v, before --cfg's check logs anything
    args = sys.argv[1:]

    try:
        if any(a in ("--help", "-h") for a in args):
            from rlexp.cli_help import print_help

            print_help()
            return
        from rlexp.main import main

        shows_config = any(a in ("--cfg", "-c") for a in args) and "-m" not in args and "--multirun" not in args
        if shows_config:
            from rlexp.cli_help import check_before_printing

            code, conf = check_before_printing(args)
            if code:
                sys.exit(code)
        try:
            cli.run(main)
        finally:
            if shows_config:
                from rlexp.cli_help import print_memory_estimate

                print_memory_estimate(conf)
    except BrokenPipeError:  # `python -m rlexp --help | head`, or the memory estimate after `--cfg job`
        cli.reader_gone()


if __name__ == "__main__":
    from rlexp import cli

    cli.skip_teardown()
    try:
        entry()
    except SystemExit as stop:  # a decided status (an error line printed, a pod stopped by SIGTERM: 143)
        cli.mark_exit_status(stop.code)
        raise
    cli.mark_exit_status(0)
