"""User-facing errors: one line `rlexp: error: <key or argument>=<value>: <what is wrong>; <the fix>`, no traceback.

Exit status 2 for a usage error (a value, an argument, a config rule), 1 for a failure at run time (a file
that cannot be read, a port in use, a corrupt checkpoint). HYDRA_FULL_ERROR=1 (or `--debug`) keeps the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

from rlexp import log_setup, redact


class RlexpError(Exception):
    """An error caused by user input (config, files, environment), reported as one line."""

    exit_code = 2  # usage error; RunError (and `exit_code=1`) for failures at run time

    def __init__(self, message: str = "", *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    def __reduce__(self) -> tuple:
        # Pickled across processes (a Slurm job's result reaches the submitting side that way): keep the message,
        # exit status and fields without calling __init__, whose arguments differ between subclasses.
        return (_restore_error, (type(self), self.args, dict(self.__dict__)))


def _restore_error(cls: type[RlexpError], args: tuple, state: dict) -> RlexpError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class RunError(RlexpError):
    """A failure at run time that the user can fix (a file, a port, a checkpoint): exit status 1."""

    exit_code = 1


class ConfigError(RlexpError):
    """A config value that breaks a rule; the message names key, value and fix."""

    def __init__(self, key: str, value: Any, fix: str) -> None:
        self.key, self.value, self.fix = key, value, fix
        super().__init__(f"{key}={value!r}: {fix}")


@contextlib.contextmanager
def user_errors_from_resolvers() -> Iterator[None]:
    """A ConfigError raised inside a resolver (e.g. a topology that contradicts the slice name) reaches
    us wrapped by OmegaConf, without its cause: report its message as the one-line user error it is."""
    from omegaconf.errors import InterpolationResolutionError

    try:
        yield
    except InterpolationResolutionError as err:
        msg = str(err).splitlines()[0]
        if "Error raised while resolving interpolation: " in msg:
            raise RlexpError(msg.split("raised while resolving interpolation: ", 1)[1]) from None
        raise


def full_traceback() -> bool:
    """True when the user asked for tracebacks (HYDRA_FULL_ERROR=1, or `--debug`, which sets it)."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def exit_with_message(err: BaseException, code: int | None = None) -> NoReturn:
    """Print `rlexp: error: <message>` as one line and exit with the error's status (2 usage, 1 run time);
    HYDRA_FULL_ERROR=1 re-raises for the traceback.

    The entry layer (rlexp.cli) reports every user error through this. Hydra callbacks call it directly:
    Hydra turns an exception raised in a callback into a warning, so a callback must end the process itself.
    """
    print_error(err)
    end_quietly_on_interrupt()
    sys.exit(code if code is not None else getattr(err, "exit_code", 2))


def end_quietly_on_interrupt() -> None:
    """From now on (the error is printed, the process is ending) a Ctrl-C ends it at once with status 130, instead
    of a KeyboardInterrupt traceback from inside an exit handler (JAX's backend teardown, orbax's threads)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda *_: os._exit(130))


def print_error(err: BaseException) -> None:
    """`rlexp: error: <message>` on stderr; HYDRA_FULL_ERROR=1 re-raises `err` to keep its traceback."""
    if full_traceback():
        raise err
    redact.note_argv()  # a key given on the command line, whatever the error is (rlexp.redact)
    text = redact.scrub(" ".join(str(err).split("\n")).strip())  # one line, whatever the message held, no secret
    print(f"rlexp: error: {text}", file=sys.stderr, flush=True)


class ArgumentParser(argparse.ArgumentParser):
    """argparse for rlexp's commands: a usage error is one `rlexp: error:` line (exit 2), `--debug` keeps
    tracebacks, `-q`/`-v` set the status lines' level (rlexp.log_setup). Lives in the base layer so that every
    command, scripts and `python -m rlexp.models.*` included, can use it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--debug", action="store_true", help="show the full traceback of an error")
        # default SUPPRESS: a subcommand's parser (of this class too) must not reset a flag given before it
        for flags, level, what in (
            (log_setup.QUIET, logging.WARNING, "only warnings"),
            (log_setup.VERBOSE, logging.DEBUG, "debug lines too"),
        ):
            self.add_argument(
                *flags,
                dest="log_level",
                action="store_const",
                const=level,
                default=argparse.SUPPRESS,
                help=f"status lines on stderr: {what}",
            )

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        argv = list(sys.argv[1:] if args is None else args)
        if "--debug" in argv:  # before parsing, so a usage error also keeps its traceback
            os.environ["HYDRA_FULL_ERROR"] = "1"
        parsed = super().parse_args(argv, namespace)
        log_setup.configure(getattr(parsed, "log_level", logging.INFO))
        return parsed

    def error(self, message: str) -> NoReturn:
        text = message
        if text.startswith("argument "):  # "argument --port: invalid int value: 'x'" -> "--port: invalid ..."
            name, _, rest = text[len("argument ") :].partition(": ")
            value = ""
            choice = re.fullmatch(r"invalid choice: '([^']*)' \(choose from (.*)\)", rest)
            if "\0" in rest:  # from in_range: "<value>\0<what is wrong>"
                value, _, rest = rest.partition("\0")
            elif choice:
                value, rest = choice.group(1), f"no such choice; use one of {choice.group(2).replace(chr(39), '')}"
            elif rest.startswith("invalid ") and ": " in rest:
                rest, _, value = rest.rpartition(": ")
                value = value.strip("'")
            text = f"{name.split('/')[0]}={value}: {rest}" if value else f"{name.split('/')[0]}: {rest}"
        elif text.startswith("the following arguments are required: "):
            text = f"{text.split(': ', 1)[1]}: missing; the command needs it"
        elif text.startswith("unrecognized arguments: "):
            text = f"{text.split(': ', 1)[1]}: no such argument"
        redact.note_argv()
        print(redact.scrub(f"rlexp: error: {text}; see {self.prog} --help"), file=sys.stderr, flush=True)
        sys.exit(2)


def in_range(kind: type, lo: float | None = None, hi: float | None = None, *, hi_open: bool = False) -> Any:
    """An argparse `type=` that accepts a finite number of `kind` within [lo, hi] (or [lo, hi))."""

    def parse(text: str) -> Any:
        import math

        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}\0not {'an integer' if kind is int else 'a number'}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text}\0must be a finite number")
        if (lo is not None and value < lo) or (hi is not None and (value >= hi if hi_open else value > hi)):
            span = f"in [{lo}, {hi}{')' if hi_open else ']'}" if hi is not None else f">= {lo}"
            raise argparse.ArgumentTypeError(f"{text}\0must be {span}")
        return value

    parse.__name__ = kind.__name__
    return parse
