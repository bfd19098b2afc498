"""The entry layer's error handling, shared by every command (`python -m rlexp`, validate, report, export,
jobs, serve_reward, scripts): a bad input ends with one line, `rlexp: error: <key>=<value>: <what>; <fix>`.

Exit status 2 for a usage error, 1 for a failure at run time (rlexp.errors). `RlexpError` from any layer is
printed as it is. A Hydra app's overrides are checked before Hydra composes (`check_command_line`:
rlexp.config.overrides); Hydra's composition errors that only composing finds, OmegaConf's interpolation errors and
OS errors naming a file are translated here, from the texts in `TEXTS`, each pinned by a test. Anything else keeps its traceback (a bug in rlexp), and
HYDRA_FULL_ERROR=1 or `--debug` keeps the traceback for every error. A run that fails after it took its run
dir appends the full traceback to `<run dir>/<job>.log`.
"""

from __future__ import annotations

import atexit
import datetime
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

# The texts of Hydra's and OmegaConf's exceptions still read here, for what only composing finds (an option of
# `hydra/...`, a key of a free-form dict, an interpolation). Each is pinned against the pinned hydra-core and
# omegaconf by tests/cli/test_hydra_texts.py; where one no longer matches, the error still ends in one line
# (its first line and where to look), not a traceback. Everything checkable before composing is rlexp's own:
# rlexp.config.overrides.
TEXTS = {
    "missing_option": re.compile(
        r"Could not find '([^']+)/([^']+)'.*?Available options in '[^']+':\n(.*?)(?:\nConfig search path|\Z)", re.S
    ),
    "unknown_key": re.compile(r"Could not override '([^']+)'"),
    "append_hint": re.compile(r"use \+(\S+?)=(.*)$", re.M),
    "key_exists": re.compile(r"An item is already at '([^']+)'"),
    "delete_missing": re.compile(r"Could not delete from config. '([^']+)' does not exist"),
    "no_deletion": re.compile(r"does not support deletion"),
    "deleting": re.compile(r"override ~(\S+)"),
    "override": re.compile(r"override (\S+)=(\S*)"),
    "interpolation_key": re.compile(r"'([^']+)'"),
}

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


def _hydra_message(ex: BaseException, text: str) -> str | None:
    from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    from rlexp.config.keys import key_fix, moved_to
    from rlexp.config.overrides import grammar_error, option_error, type_fix

    if isinstance(ex, OverrideParseException):  # the typed exception names the override: no text read
        return str(grammar_error(ex.override or next((a for a in sys.argv[1:] if a in text), "?")))
    m = TEXTS["missing_option"].search(text)
    if isinstance(ex, MissingConfigException) and m:
        return str(option_error(m.group(1), m.group(2), m.group(3).split()))
    appended = TEXTS["key_exists"].search(text)
    if appended:
        given = _override_with(appended.group(1) + "=") or f"+{appended.group(1)}=..."
        return f"{_kv(given)}: the key exists already; set it without the + ({_kv(given)})"
    deleted = TEXTS["delete_missing"].search(text)
    if deleted:
        return f"{deleted.group(1)}: cannot delete it, no such key; {key_fix(deleted.group(1))}"
    deleting = TEXTS["deleting"].search(text)
    if TEXTS["no_deletion"].search(str(ex.__cause__)) and deleting:
        key = deleting.group(1).partition("=")[0]
        return f"~{key}: a key of the schema cannot be deleted; set it to another value (null where allowed)"
    cause = ex.__cause__ if isinstance(ex.__cause__, OmegaConfBaseException) else None
    if isinstance(ex, ConfigCompositionException) and cause is not None:
        unknown = TEXTS["unknown_key"].search(text)
        if unknown and unknown.group(1):
            return _unknown_key_message(unknown.group(1), TEXTS["append_hint"].search(text))
        key = getattr(cause, "full_key", None) or ""
        if moved_to(key):  # a config file still sets a key that moved into an algorithm's node
            return f"{key}: moved: use {moved_to(key)}"
        reason = str(cause).splitlines()[0].strip()
        override = TEXTS["override"].search(text)
        value = override.group(2) if override else None
        where = key or (override.group(1) if override else "?")
        return f"{where}={value!r}: {reason}; {type_fix(where)}"
    if isinstance(ex, HydraException):  # a text no pattern above knows (another Hydra release): still one line
        first = text.strip().splitlines()[0] if text.strip() else type(ex).__name__
        return f"{first}; see python -m rlexp --help"
    return None


def _unknown_key_message(key: str, hint: re.Match[str] | None) -> str:
    """A key Hydra could not set: undeclared (the nearest declared one), or one a free-form dict lacks (add it)."""
    from rlexp.config.keys import schema_field, unknown_key_error
    from rlexp.errors import ConfigError

    value = hint.group(2) if hint else "?"
    try:
        found = schema_field(key, value)
    except ConfigError as err:
        return str(err)
    if found is None:  # below `model.extra`, `reward.functions[i].kwargs`, ...: any key, added with +
        return f"{key}={value!r}: not in this config yet; add it with +{key}={value}"
    return str(unknown_key_error(key, value))


def _omegaconf_message(ex: BaseException) -> str | None:
    from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

    if not isinstance(ex, OmegaConfBaseException):
        return None
    reason = str(ex).splitlines()[0].strip() if str(ex).strip() else type(ex).__name__
    if isinstance(ex, InterpolationResolutionError):
        inner = TEXTS["interpolation_key"].search(reason)
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


_checked: list[str] | None = None  # the command line check_command_line passed last


def check_command_line(argv: list[str]) -> None:
    """Refuse a Hydra app's command line before Hydra composes it: an override's grammar, group option, key or
    value type (rlexp.config.overrides), one ConfigError whatever Hydra's wording. Once per command line. A line
    whose config can set no `hydra.mode` then spares Hydra its mode-reading compose
    (rlexp.compat.hydra.compose_once)."""
    global _checked, _modeless
    if argv == _checked:
        return
    from rlexp.compat.hydra import command_line, compose_once
    from rlexp.config.load import CONF_DIR
    from rlexp.config.overrides import check_overrides, may_set_hydra_mode

    parsed = command_line(argv)
    if parsed is not None:
        check_overrides(parsed[0], CONF_DIR, multirun=parsed[1])
    _checked = list(argv)
    _modeless = parsed[0] if parsed is not None and not may_set_hydra_mode(parsed[0]) else None
    compose_once(_mode_unset)


_modeless: list[str] | None = None  # the checked command's overrides, when its config can set no hydra.mode


def _mode_unset(overrides: list[str]) -> bool:
    """Hydra's get_mode asks for the checked command's own overrides, whose config sets no mode."""
    return _modeless is not None and overrides == _modeless


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
        check_command_line(sys.argv[1:])
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
