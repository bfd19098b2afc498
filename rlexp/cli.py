"""The entry layer's error handling, shared by every command (`python -m rlexp`, validate, report, export,
jobs, serve_reward, scripts): a bad input ends with one line, `rlexp: error: <key>=<value>: <what>; <fix>`.

Exit status 2 for a usage error, 1 for a failure at run time (rlexp.errors). `RlexpError` from any layer is
printed as it is; Hydra's composition and override-grammar errors, OmegaConf's interpolation errors and
OS errors naming a file are translated here. Anything else keeps its traceback (a bug in rlexp), and
HYDRA_FULL_ERROR=1 or `--debug` keeps the traceback for every error. A run that fails after it took its run
dir appends the full traceback to `<run dir>/<job>.log`.
"""

from __future__ import annotations

import atexit
import datetime
import difflib
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn, TypeVar

from rlexp import log_setup, redact
from rlexp.errors import (
    RlexpError,
    RunError,
    end_quietly_on_interrupt,
    exit_with_message,
    full_traceback,
    print_error,
)

T = TypeVar("T")

_MISSING_OPTION = re.compile(
    r"Could not find '([^']+)/([^']+)'.*?Available options in '[^']+':\n(.*?)(?:\nConfig search path|\Z)", re.S
)
_UNKNOWN_KEY = re.compile(r"Could not override '([^']+)'")
_APPEND_HINT = re.compile(r"use \+(\S+?)=(.*)$", re.M)
_CONVERT = re.compile(r"could not be converted to (\w+)")

# Where a run that took its run dir logs: set by the Hydra app once its checks passed (`take_run_log`).
_run_log: str | None = None


def take_run_log(path: str | None) -> None:
    """From now on a failure's traceback goes to `path` (the run's `<job>.log`); None: nowhere."""
    global _run_log
    _run_log = path


def take_debug_flag() -> None:
    """`--debug` anywhere on a Hydra app's command line: keep tracebacks. Hydra itself never sees the flag."""
    if "--debug" in sys.argv[1:]:
        sys.argv[1:] = [a for a in sys.argv[1:] if a != "--debug"]
        os.environ["HYDRA_FULL_ERROR"] = "1"


def _override_with(fragment: str) -> str | None:
    """The command-line override that contains `fragment` (the user's text, for naming what they set)."""
    return next((a for a in sys.argv[1:] if fragment and fragment in a and "=" in a), None)


def _kv(override: str) -> str:
    """`key=value` with the value shown as typed."""
    key, _, value = override.partition("=")
    return f"{key.lstrip('+~')}={value}"


def _option_message(group: str, option: str, listing: str) -> str:
    options = [o.strip() for o in listing.split() if o.strip() and not o.strip().endswith("_schema")]
    near = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    return f"{group}={option!r}: no such option; {hint}use one of {', '.join(options)}"


def _hydra_message(ex: BaseException, text: str) -> str | None:
    from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    from rlexp.config.keys import unknown_key_error

    m = _MISSING_OPTION.search(text)
    if isinstance(ex, MissingConfigException) and m:
        return _option_message(m.group(1), m.group(2), m.group(3))
    if isinstance(ex, OverrideParseException):
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("Error parsing", "See https"))]
        reason = (lines[0] if lines else "cannot parse it").split(" expecting ")[0].strip()
        override = ex.override or next((a for a in sys.argv[1:] if a in text), "?")
        return (
            f"{override}: not a valid override ({reason}); write key=value, a sweep as key=a,b or "
            "key=range(1,4), and quote values holding , ( ) [ ] { } or spaces"
        )
    appended = re.search(r"An item is already at '([^']+)'", text)
    if appended:
        given = _override_with(appended.group(1) + "=") or f"+{appended.group(1)}=..."
        return f"{_kv(given)}: the key exists already; set it without the + ({_kv(given)})"
    deleted = re.search(r"Could not delete from config. '([^']+)' does not exist", text)
    if deleted:
        return str(unknown_key_error(deleted.group(1), None)).replace("=None:", ": cannot delete it,", 1)
    if "does not support deletion" in str(ex.__cause__) and re.search(r"override ~(\S+)", text):
        key = re.search(r"override ~(\S+)", text).group(1).partition("=")[0]  # type: ignore[union-attr]
        return f"~{key}: a key of the schema cannot be deleted; set it to another value (null where allowed)"
    cause = ex.__cause__ if isinstance(ex.__cause__, OmegaConfBaseException) else None
    if isinstance(ex, ConfigCompositionException) and cause is not None:
        unknown = _UNKNOWN_KEY.search(text)
        if unknown and unknown.group(1):
            hint = _APPEND_HINT.search(text)
            return str(unknown_key_error(unknown.group(1), hint.group(2) if hint else "?"))
        key = getattr(cause, "full_key", None) or ""
        reason = str(cause).splitlines()[0].strip()
        override = re.search(r"override (\S+)=(\S*)", text)
        value = override.group(2) if override else None
        typed = _CONVERT.search(reason)
        fix = f"give a {typed.group(1).lower()}" if typed else "see python -m rlexp --cfg job for the key's type"
        return f"{key or (override.group(1) if override else '?')}={value!r}: {reason}; {fix}"
    if isinstance(ex, HydraException):
        first = text.strip().splitlines()[0] if text.strip() else type(ex).__name__
        return f"{first}; see python -m rlexp --help"
    return None


def _omegaconf_message(ex: BaseException) -> str | None:
    from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

    if not isinstance(ex, OmegaConfBaseException):
        return None
    reason = str(ex).splitlines()[0].strip() if str(ex).strip() else type(ex).__name__
    if isinstance(ex, InterpolationResolutionError):
        inner = re.search(r"'([^']+)'", reason)
        user = _override_with("${" + inner.group(1)) if inner else None
        user = user or _override_with("${")
        where = _kv(user) if user else f"{getattr(ex, 'full_key', None) or '?'}"
        return f"{where}: {reason}; refer to a key that exists, e.g. ${{model.name}}"
    key = getattr(ex, "full_key", None) or "?"
    return f"{key}: {reason}; see python -m rlexp --cfg job"


def one_line(ex: BaseException) -> str | None:
    """The one-line message for a user error, or None when it is not one rlexp knows."""
    if isinstance(ex, RlexpError):
        return str(ex)
    text = str(ex)
    message = _hydra_message(ex, text) or _omegaconf_message(ex)
    if message is not None:
        return message
    if isinstance(ex, OSError) and ex.filename is not None:
        where = str(ex.filename)
        for key in ("hydra.run.dir", "hydra.sweep.dir", "output_dir"):  # the run dir: name the key that set it
            given = next((a for a in sys.argv[1:] if a.lstrip("+").startswith(key + "=")), None)
            if given and given.partition("=")[2].startswith(where):
                where = _kv(given)
        return f"{where}: {ex.strerror or text}; check the path and its permissions"
    return None


def exit_code(ex: BaseException) -> int:
    """2 for a usage error, 1 for a failure at run time."""
    from hydra.errors import HydraException

    if isinstance(ex, RlexpError):
        return ex.exit_code
    return 1 if isinstance(ex, OSError) and not isinstance(ex, HydraException) else 2


def _log_traceback(ex: BaseException, message: str) -> None:
    """Append the failure and its traceback to the run's log (the one line on stderr points nowhere else)."""
    if _run_log is None:
        return
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    text = "".join(traceback.format_exception(type(ex), ex, ex.__traceback__))
    try:
        with open(_run_log, "a", encoding="utf-8") as f:
            f.write(redact.scrub(f"[{stamp}][rlexp][ERROR] - {message}\n{text}"))
    except OSError:
        pass  # the log is a convenience; the one-line error still reaches the user


def _report(ex: BaseException) -> bool:
    """Print a known error as one line and exit; False leaves it to Hydra's report (with its traceback)."""
    if isinstance(ex, BrokenPipeError):  # `python -m rlexp --cfg job | head`
        reader_gone()
    if full_traceback():
        return False
    message = one_line(ex)
    if message is None:
        return False
    _log_traceback(ex, message)
    exit_with_message(RlexpError(message, exit_code=exit_code(ex)))


def _quiet(ex: BaseException) -> bool:
    return not full_traceback() and one_line(ex) is not None


def install() -> None:
    """Report errors inside Hydra apps (composition, task function, launchers) through `one_line`.
    Call before a `hydra.main` function runs."""
    from rlexp.compat.hydra import wrap_error_reporting

    wrap_error_reporting(_report, quiet=_quiet)


def _interrupted() -> NoReturn:
    print_error(RunError("interrupted (Ctrl-C); rerun the same command to start again or resume"))
    end_quietly_on_interrupt()
    sys.exit(130)


def run(main: Callable[[], T]) -> T:
    """Run a Hydra app: a user error is one line (exit 2, or 1 at run time), not a traceback. `--debug`, `-q`
    and `-v` are taken off the command line first (rlexp.log_setup)."""
    take_debug_flag()
    log_setup.take_level_flags()
    install()
    import logging

    # a log file on a full disk: not a "--- Logging error ---" traceback per line; the run's error says it
    logging.raiseExceptions = full_traceback()
    try:
        return main()
    except RlexpError as err:
        exit_with_message(err)
    except BrokenPipeError:
        reader_gone()
    except KeyboardInterrupt:
        if full_traceback():
            raise
        _interrupted()


def reader_gone() -> NoReturn:
    """stdout's reader left (`python -m rlexp.jobs status … | head`): end quietly, as Unix tools do. stdout is
    pointed at /dev/null first, or Python's exit flush would raise BrokenPipeError again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(141)  # 128 + SIGPIPE, the status a shell reports for a tool stopped by a closed pipe


_exit_status: int | None = None  # set once the process's status is decided (`mark_exit_status`)


def skip_teardown() -> None:
    """Register first thing in a process: once its exit status is decided (`mark_exit_status`), end it with that
    status right after the last exit handler instead of tearing the interpreter down. Registered first, the handler
    runs last, after the other exit handlers (logging's, wandb's, multiprocessing's, jax.distributed's) and after
    non-daemon threads were joined; a traceback (a bug) ends the ordinary way.

    Why: teardown frees every module, jitted program and array one by one, 1.2 s after a `python -m rlexp` run
    that has already written everything (benchmarks/README.md); and Python restores the default action of every
    signal before it, so a pod's SIGTERM arriving then (its peer stopped the run first, the run's files are
    written) killed a process that was ending with 143 as one killed by the signal (-15)."""
    atexit.register(_end_now)


def mark_exit_status(code: object) -> None:
    """The status the process ends with: `sys.exit(code)`'s (None is 0, a message is 1)."""
    global _exit_status
    _exit_status = code if isinstance(code, int) else 0 if code is None else 1


def _end_now() -> None:
    if _exit_status is None:
        return
    import logging

    logging.shutdown()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: leave the report to the ordinary exit
        return
    os._exit(_exit_status)


def command(main: Callable[[], int]) -> int:
    """Run a command-line tool's main function: a user error is one line (exit 2, or 1 at run time)."""
    try:
        return main()
    except BrokenPipeError:
        reader_gone()
    except KeyboardInterrupt:
        if full_traceback():
            raise
        _interrupted()
    except Exception as err:  # noqa: BLE001 - translated below, or re-raised with its traceback
        message = None if full_traceback() else one_line(err)
        if message is None:
            raise
        print_error(RlexpError(message))
        return exit_code(err)
    raise AssertionError("unreachable")
