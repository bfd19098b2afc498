"""Status lines of every rlexp command: records of the `rlexp.*` loggers, shown on stderr as plain lines.

An INFO line is its message as it is (`rlexp: step 4/8 reward 0.312 eta 3 s`); a warning reads
`rlexp: warning: <message>` and a DEBUG line `rlexp: debug: <message>`. Every command takes `-q/--quiet`
(warnings and errors only) and `-v/--verbose` (DEBUG lines too): the argparse commands through
rlexp.errors.ArgumentParser, the Hydra apps (`python -m rlexp`, rlexp.validate) through `take_level_flags`, which
removes the flags before Hydra reads the command line. Inside a Hydra job, conf/config.yaml's `hydra.job_logging`
gives the `rlexp` logger a `StatusHandler` beside the run's `<job>.log`, which keeps every INFO line under `-q`.

The handler is on the `rlexp` logger from the package's import (`install`), so a warning shows in any process
that runs rlexp's code, tests included; records do not propagate to the root logger. Only rlexp's loggers are
set: other libraries' (absl, jax, orbax) keep their levels, so their INFO lines stay hidden. The one-line error a
failing command ends with is not a log record (rlexp.errors.print_error). Every handler here scrubs the
records' secrets (rlexp.redact), and `configure` has stdout and stderr scrub theirs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

from rlexp import redact

LOGGER = "rlexp"
QUIET = ("-q", "--quiet")
VERBOSE = ("-v", "--verbose")

# The console's level for the handlers that Hydra's job logging makes during this process (take_level_flags).
_console_level = logging.NOTSET
_taken = False  # take_level_flags ran in this process


class StatusFormatter(logging.Formatter):
    """The message alone for INFO; `rlexp: <level>: ` before it otherwise, after any leading blank lines."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno == logging.INFO:
            return text
        body = text.lstrip("\n")
        return f"{text[: len(text) - len(body)]}rlexp: {record.levelname.lower()}: {body}"


class StatusHandler(logging.StreamHandler):
    """Writes each line to the stderr of the moment (a redirected or captured sys.stderr included)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(StatusFormatter())
        self.setLevel(_console_level)
        self.addFilter(redact.RedactFilter())

    @property
    def stream(self):  # type: ignore[override]  # noqa: ANN201 - a property of StreamHandler's attribute
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:  # StreamHandler.__init__ assigns it; the property wins
        pass


def library_verbose() -> bool:
    """Whether other libraries' records below WARNING are wanted: -v, or HYDRA_FULL_ERROR=1 (debugging)."""
    return _console_level == logging.DEBUG or os.environ.get("HYDRA_FULL_ERROR") == "1"


class LibraryHandler(logging.StreamHandler):
    """Hydra's console handler, which gets other libraries' records (datasets, absl, jax): WARNING and up (absl:
    CRITICAL), unless `library_verbose()`. main.log keeps them all."""

    def __init__(self, stream: object = None) -> None:
        super().__init__(stream)  # type: ignore[arg-type]
        self.setLevel(logging.NOTSET if library_verbose() else logging.WARNING)
        self.addFilter(redact.RedactFilter())

    def filter(self, record: logging.LogRecord) -> bool:
        # orbax logs each failed write of its threads as an absl ERROR before it raises; the run's one-line
        # error says what failed (main.log keeps them)
        if record.name == "absl" and record.levelno < logging.CRITICAL and not library_verbose():
            return False
        return bool(super().filter(record))


class RunLogHandler(logging.FileHandler):
    """The run's `<job>.log` (main.log; conf/config.yaml's `hydra.job_logging`): every record, secrets scrubbed."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.addFilter(redact.RedactFilter())


@contextlib.contextmanager
def quiet_libraries(*names: str) -> Iterator[None]:
    """Hide the named libraries' records below ERROR while the block runs (a hub download's retry warnings
    before the one-line error that sums them up), unless `library_verbose()`."""
    if library_verbose():
        yield
        return
    loggers = [logging.getLogger(n) for n in names]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved, strict=True):
            lg.setLevel(level)


def shows(logger: logging.Logger, level: int = logging.INFO) -> bool:
    """Whether a status line of `level` from `logger` reaches the console (-q hides INFO: a progress bar too)."""
    return logger.isEnabledFor(level) and level >= _console_level


def install() -> None:
    """Give the `rlexp` logger its console handler, once per process (the package's import does this, so that
    rlexp's warnings show wherever its code runs). The records stop at the `rlexp` logger: a root handler (Hydra's
    console, the one orbax's import installs) would print each line a second time, with a prefix."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(h, StatusHandler) for h in logger.handlers):
        logger.addHandler(StatusHandler())
    logger.propagate = False


def configure(level: int = logging.INFO, *, hydra: bool = False) -> None:
    """Show rlexp's status lines on stderr from `level` up (logging.INFO, WARNING for -q, DEBUG for -v).

    A plain command: the `rlexp` logger logs from INFO (DEBUG under -v) whatever the root logger's level. A Hydra
    app (`hydra=True`): its level is left to Hydra (the root at INFO, `hydra.verbose`) unless -v asks for DEBUG.
    """
    global _console_level
    redact.guard_streams()  # every command's prints and tracebacks lose their secrets (rlexp.redact)
    _console_level = logging.NOTSET if level == logging.INFO else level
    logger = logging.getLogger(LOGGER)
    if level == logging.DEBUG:
        logger.setLevel(logging.DEBUG)
    elif not hydra:
        logger.setLevel(logging.INFO)
    install()
    for handler in logger.handlers:
        if isinstance(handler, StatusHandler):
            handler.setLevel(_console_level)


def take_level_flags(argv: list[str] | None = None) -> None:
    """Remove -q/--quiet and -v/--verbose from a Hydra app's command line (sys.argv by default) and configure
    logging for them (the later of the two wins, as with argparse); Hydra itself never sees the flags. A second
    call, after the flags were taken, keeps what the first one set."""
    global _taken
    args = sys.argv if argv is None else argv
    flags = [a for a in args[1:] if a in QUIET or a in VERBOSE]
    if flags or not _taken:
        level = logging.INFO if not flags else logging.WARNING if flags[-1] in QUIET else logging.DEBUG
        configure(level, hydra=True)
    args[1:] = [a for a in args[1:] if a not in QUIET and a not in VERBOSE]
    _taken = True
