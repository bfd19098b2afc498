"""Hydra 1.3.8 internals rlexp relies on (hydra-core is pinned in pyproject.toml).

- `wrap_error_reporting`: Hydra prints composition errors in several lines (search path, reference types)
  from `hydra._internal.utils.run_and_report`, and a failed job's "Error executing job with overrides" line
  from `JobReturn.return_value`, and offers no hook; rlexp's rule is one line per error.
- `apply_value_overrides` and `overrides_dirname`: the launcher composes a sweep's value-only jobs once
  and applies each job's leaf overrides exactly as Hydra's config loader does after composing.
- `split_basic_sweep`: the job list the basic sweeper will run, to write sweep.json before the first job.
- `basic_sweeper_class`: rlexp's sweeper (`hydra/sweeper=rlexp`) is Hydra's basic sweeper with a faster batch
  validation; Hydra exports the class only from its internal package.
- `config_loader`: a `glob(...)` sweep expands only with a config loader, which Hydra gives its sweeper but not
  the multirun callback that writes sweep.json first.
- `command_line`: the overrides of a Hydra app's command line, read by Hydra's own argument parser (which Hydra
  exports only from its internal package), so rlexp checks exactly what Hydra will compose.
- `compose_once`: Hydra's `_run_hydra` composes an app's whole config twice for one run, first in `Hydra.get_mode`
  only to read `hydra.mode`; where rlexp knows that answer without composing, get_mode gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlexp.compat import patching

COMPOSE_ONCE = "compose_once"  # the patch's name (rlexp.compat.patching)
COMPOSE_ONCE_SWITCH = "RLEXP_HYDRA_COMPOSE_ONCE"  # =0: Hydra's own get_mode, composing twice


def wrap_error_reporting(handler: Callable[[BaseException], bool], quiet: Callable[[BaseException], bool]) -> None:
    """Route every exception Hydra reports through `handler` first; it returns True when it reported
    the error itself (and exited), False to keep Hydra's own report. Idempotent.

    A failed job's `JobReturn.return_value` writes "Error executing job with overrides: ..." to stderr
    before re-raising; for errors `quiet` accepts (those `handler` reports as one line) it only re-raises.
    """
    from hydra._internal import utils as hydra_utils
    from hydra.core.utils import JobReturn, JobStatus

    original: Callable[[Any], Any] = hydra_utils.run_and_report
    if getattr(original, "_rlexp", False):
        return

    def run_and_report(func: Any) -> Any:
        try:
            return func()
        except Exception as ex:  # noqa: BLE001 - re-reported below
            handler(ex)
            error = ex

            def rethrow() -> None:
                raise error

            return original(rethrow)  # Hydra's own report

    run_and_report._rlexp = True  # type: ignore[attr-defined]
    hydra_utils.run_and_report = run_and_report

    returned = JobReturn.return_value

    def return_value(self: Any) -> Any:
        if self.status == JobStatus.FAILED and quiet(self._return_value):
            raise self._return_value
        return returned.fget(self)

    JobReturn.return_value = property(return_value, returned.fset)  # type: ignore[method-assign]


# flags after which the app composes another config, or none at all: rlexp's checks of the overrides stand aside
_OTHER_MODES = {"-h", "--help", "--hydra-help", "--version", "-sc", "--shell-completion", "-i", "--info"}
_OTHER_MODES |= {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "--experimental-rerun"}


def command_line(argv: Sequence[str]) -> tuple[list[str], bool] | None:
    """(the overrides, whether it is a multirun) of a Hydra app's command line, as Hydra's parser reads them;
    None when the line asks for something else than composing rlexp's config (help, another config dir, a rerun)
    or Hydra's parser refuses it (Hydra then reports it)."""
    from hydra._internal.utils import get_args_parser

    if any(a.partition("=")[0] in _OTHER_MODES for a in argv):
        return None
    parser = get_args_parser()

    def refuse(message: str) -> None:
        raise ValueError(message)

    parser.error = refuse  # type: ignore[method-assign]  # no usage text on stderr: Hydra's run reports it
    try:
        args, _ = parser.parse_known_args(list(argv))
    except ValueError:
        return None
    return list(args.overrides), bool(args.multirun)


def apply_value_overrides(overrides: Sequence[Any], cfg: Any) -> None:
    """Set parsed leaf overrides (`key=value`) on a composed config, as Hydra does after composing."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    ConfigLoaderImpl._apply_overrides_to_config(list(overrides), cfg)


def overrides_dirname(overrides: Sequence[Any], *, kv_sep: str, item_sep: str, exclude_keys: Sequence[str]) -> str:
    """`hydra.job.override_dirname` of a job with these parsed overrides."""
    from hydra._internal.config_loader_impl import get_overrides_dirname

    return get_overrides_dirname(
        overrides=list(overrides), kv_sep=kv_sep, item_sep=item_sep, exclude_keys=list(exclude_keys)
    )


def split_basic_sweep(parsed: Sequence[Any]) -> list[list[str]]:
    """The override lists of every job Hydra's basic sweeper builds from parsed sweep overrides."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper.split_arguments(list(parsed), None)[0]


def basic_sweeper_class() -> type:
    """Hydra's BasicSweeper class (`hydra/sweeper=basic`)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def config_loader(conf_dir: str) -> Any:
    """A config loader over `conf_dir` and the plugins' search paths, as `@hydra.main` builds one (Hydra's private
    ConfigLoaderImpl): what a `glob(...)` sweep needs to list a group's options."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path

    return ConfigLoaderImpl(config_search_path=create_config_search_path(conf_dir))


def compose_once(mode_unset: Callable[[list[str]], bool]) -> None:
    """Let `Hydra.get_mode` answer None (no `hydra.mode` in the config: Hydra then runs or sweeps as `-m` says)
    without composing the config, for the overrides `mode_unset` accepts; others compose as Hydra does.

    Why: for one run Hydra composes the whole config twice, first only to read `hydra.mode` (get_mode), then to run
    it. Skipping the first took a refused command that composes from 0.80 to 0.66 CPU-s (AMD EPYC, 2 cores), and
    every command starts that much sooner. The answer is None whenever the config sets no `hydra.mode`, and a
    composition that fails answers None too, so skipping it changes nothing Hydra does next. Guarded by the
    fingerprint of Hydra 1.3.8's get_mode; the environment variable RLEXP_HYDRA_COMPOSE_ONCE=0 leaves Hydra's own.
    Installing again keeps the first `mode_unset`: pass one that reads the current command."""
    import os

    from hydra._internal.hydra import Hydra

    if os.environ.get(COMPOSE_ONCE_SWITCH, "1") == "0":
        patching.uninstall(COMPOSE_ONCE)
        return
    target = patching.Target(Hydra, "get_mode", "e9440dd4e03a6c5a", distribution="hydra-core")

    def layer(get_mode: Callable[..., Any]) -> Callable[..., Any]:
        def mode_read_without_composing(self: Any, config_name: str | None, overrides: list[str]) -> Any:
            return None if mode_unset(list(overrides)) else get_mode(self, config_name, overrides)

        return mode_read_without_composing

    off = f"run without it: {COMPOSE_ONCE_SWITCH}=0"
    patching.install(COMPOSE_ONCE, [(target, 50, layer)], off, key=COMPOSE_ONCE_SWITCH)
