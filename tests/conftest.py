"""What one test changes in this process is undone before the next; which tests share a worker.

The suite runs under pytest-xdist (pyproject's addopts): one worker per core, each a long-lived pytest process
that runs many tests in turn, so the state a test leaves in its process is put back here.

Several tests run the user's commands in-process (tests.launch.conftest.run_cli, rlexp.train in-process), and a
Hydra app configures the process as a command would: `logging.config.dictConfig` of hydra/job_logging (handlers
on the root logger bound to that test's captured sys.stdout and <run dir>/main.log), GlobalHydra and HydraConfig
set, the JAX compilation cache switched on. Each test starts from the state the session had before it.
"""

from __future__ import annotations

import logging
import os
import sys
import weakref
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest


def _absl_stream_off_the_capture() -> None:
    """absl creates its handler at import, bound to the sys.stderr of that moment: imported while pytest collects
    (jax, flax, tunix, orbax import it), that is pytest's global capture. Every `logging.config.dictConfig`
    (each in-process Hydra run) closes every handler of the process, and absl's `close` closes its stream unless
    it is the current sys.stderr: under capsys it is not, so the session's capture file was closed and pytest
    ended in "I/O operation on closed file" / "lost sys.stderr". absl writes its records to the current
    sys.stderr (`_log_to_stderr`) either way; its own stream is only ever closed, so point it at the process's
    stderr, which absl never closes. Run before any test module imports absl."""
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


_absl_stream_off_the_capture()


# Tests that share one outside resource run on one worker, in collection order: the local Slurm (one cluster per
# session, brought up and down by tests/slurm/conftest.py) and the bad-input table, whose session fixture runs
# every selected case of the table at once (on two workers it would run them all twice). xdist's own
# `xdist_group` mark cannot do it under pytest 9 (it renames node ids through an attribute pytest 9 no longer
# reads), so the scheduler below groups by node id itself.
GROUPS = {
    "tests/slurm/": "slurm",
    "tests/cli/test_bad_inputs.py::test_bad_input_is_one_line": "bad_inputs",
    # both read the session's one 300-step default run (`default_run` below)
    "tests/train/test_opd.py": "default_run",
    "tests/perf/test_perf_patches.py": "default_run",
}


def _module_fixture_places() -> tuple[str, ...]:
    """Test modules (and folders, by their conftest.py) that define a module-scoped fixture: each such module is
    one work unit, so its fixture (a trained run, a server) is built once, not once per worker."""
    tests = Path(__file__).parent
    places = []
    for path in sorted(tests.rglob("*.py")):
        if path != Path(__file__) and 'scope="module"' in path.read_text(encoding="utf-8"):
            rel = path.relative_to(tests.parent).as_posix()
            places.append(rel.rsplit("/", 1)[0] + "/" if path.name == "conftest.py" else rel + "::")
    return tuple(places)


MODULE_UNITS = _module_fixture_places()


def group_of(nodeid: str) -> str:
    """The work unit a test is sent in: its group's name, its module where the module shares a fixture, else the
    test alone (xdist's `load`)."""
    for prefix, group in GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    return nodeid.split("::", 1)[0] if nodeid.startswith(MODULE_UNITS) else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker per usable core (xdist's `auto` counts physical cores: 1 on a 2-vCPU machine), at most 8: each
    worker may hold a JAX client and a training run."""
    return max(1, min(8, len(os.sched_getaffinity(0))))


def _logging_state() -> tuple:
    manager = logging.Logger.manager
    loggers = [logging.root, *(lg for lg in list(manager.loggerDict.values()) if isinstance(lg, logging.Logger))]
    return (manager.disable, logging.raiseExceptions), [
        (lg, lg.level, list(lg.handlers), list(lg.filters), lg.propagate, lg.disabled) for lg in loggers
    ]


def _restore_logging(state: tuple) -> None:
    """Loggers made during the test (a module imported for the first time) keep what their import set up."""
    (disable, raise_exceptions), loggers = state
    logging.disable(disable)
    logging.raiseExceptions = raise_exceptions  # rlexp's error layer sets it for the command it runs
    for lg, level, handlers, filters, propagate, disabled in loggers:
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.filters[:] = filters
        lg.propagate, lg.disabled = propagate, disabled
    logging.Logger.manager._clear_cache()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Logging as it was before the test. Taken around the whole protocol, outside the handlers pytest's logging
    plugin attaches for each phase (setup, call, teardown), so those are not put back. What a Hydra app leaves:
    root's handlers replaced by a StreamHandler on the test's captured stdout (closed after the test: later records
    fail with "I/O operation on closed file") and a FileHandler on that run's main.log (later tests' records were
    appended to it), root at INFO, loggers' levels and filters set by the run."""
    state = _logging_state()
    try:
        return (yield)
    finally:
        _restore_logging(state)


def _jax_config() -> dict[str, object] | None:
    jax = sys.modules.get("jax")
    return dict(jax.config.values) if jax is not None and hasattr(jax, "config") else None


@pytest.fixture(autouse=True)
def _process_state_restored() -> Iterator[None]:
    """cwd, os.environ, Hydra's global state and JAX's config flags as they were before the test."""
    cwd, environ, jax_before = os.getcwd(), dict(os.environ), _jax_config()
    yield
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()  # an in-process app or an unclosed initialize_config_dir leaves it set
    HydraConfig.instance().cfg = None  # a run sets it; trackers outside a Hydra job must not read a stale one
    if os.getcwd() != cwd:
        os.chdir(cwd)
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)
    jax_after = _jax_config()
    if jax_after is not None:
        import jax

        for name, value in jax_after.items():
            if jax_before is not None and name in jax_before and jax_before[name] != value:
                jax.config.update(name, jax_before[name])


@pytest.fixture(scope="session", autouse=True)
def _grader_pools_stopped() -> Iterator[None]:
    """The reward functions keep their math-verify GraderPool for the process (a run grades every step): stop
    every pool and the forkserver its workers came from at the end of the session, not at interpreter exit,
    after pytest's capture is gone."""
    yield
    grading = sys.modules.get("rlexp.rewards.grading")
    if grading is None:
        return
    for finalizer, info in list(weakref.finalize._registry.items()):  # each pool's close(), as at exit
        if info.func is grading._shutdown:
            finalizer()
    from multiprocessing import forkserver

    forkserver._forkserver._stop()


@pytest.fixture(scope="session")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default as a user types it (`python -m rlexp`, 300 steps; logger=none), trained once for the
    tests that read a whole default run (OPD's teacher, the patched half of perf.patches), which GROUPS keep on
    one worker. XLA dumps its train step's programs to <dir>/hlo; the run dir is <dir>/run."""
    from tests.helpers import run_rlexp

    folder = tmp_path_factory.mktemp("default_run")
    flags = f"--xla_dump_to={folder / 'hlo'} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*train_step.*"
    out = run_rlexp("logger=none", f"hydra.run.dir={folder / 'run'}", env={**os.environ, "XLA_FLAGS": flags})
    assert out.returncode == 0, out.stderr[-3000:]
    return folder
