"""Status lines through `logging` (rlexp.log_setup): plain lines on stderr, `-q` keeps only warnings, `-v` adds
DEBUG lines, on the argparse commands and on the Hydra apps; errors stay one line whatever the flags say."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rlexp import log_setup
from rlexp.errors import ArgumentParser
from tests.helpers import REPO
from tests.test_console import FIXTURE, rlexp

RECIPES = REPO / "tests" / "fixtures" / "recipes"
# a preflight that reads given completions: no model is loaded, a few seconds
VALIDATE = [
    "experiment=gemma4_e4b_omi2",
    "reward=math_format",
    f"dataset.source={RECIPES / 'omi2_train_1M.jsonl'}",
    "trainer.batch_size=2",
    "trainer.micro_batch_size=1",
    "trainer.rollout_micro_batch_size=2",
    "trainer.max_steps=4",
    f"validate.completions={RECIPES / 'omi2_completions.jsonl'}",
]


@pytest.fixture
def rlexp_logger() -> Iterator[logging.Logger]:
    """The `rlexp` logger, its handlers' levels and log_setup's state put back after the test."""
    logger = logging.getLogger(log_setup.LOGGER)
    saved = logger.level, [(h, h.level) for h in logger.handlers], log_setup._console_level, log_setup._taken
    yield logger
    logger.setLevel(saved[0])
    for handler, level in saved[1]:
        handler.setLevel(level)
    log_setup._console_level, log_setup._taken = saved[2:]


def record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("rlexp.x", level, __file__, 1, message, None, None)


def test_a_status_line_is_plain_and_a_warning_says_so() -> None:
    fmt = log_setup.StatusFormatter()
    assert (
        fmt.format(record(logging.INFO, "rlexp: step 2/4 reward 0.252 eta 2 s"))
        == "rlexp: step 2/4 reward 0.252 eta 2 s"
    )
    assert fmt.format(record(logging.WARNING, "checkpoint 6 cannot be restored")) == (
        "rlexp: warning: checkpoint 6 cannot be restored"
    )
    assert fmt.format(record(logging.DEBUG, "x")) == "rlexp: debug: x"
    # a line that starts on a fresh line (after a progress bar) keeps its blank line before the prefix
    assert fmt.format(record(logging.WARNING, "\nSIGTERM received")) == "\nrlexp: warning: SIGTERM received"


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        ([], logging.INFO),
        (["-q", "status", "x"], logging.WARNING),  # before the subcommand: its parser must not reset it
        (["status", "--quiet", "x"], logging.WARNING),
        (["-v", "status", "x"], logging.DEBUG),
        (["-q", "status", "-v", "x"], logging.DEBUG),  # the later flag wins
    ],
)
def test_the_flags_set_the_console_level(argv: list[str], level: int, rlexp_logger: logging.Logger) -> None:
    parser = ArgumentParser(prog="t")
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("status").add_argument("target")
    parser.parse_args(argv)
    assert rlexp_logger.getEffectiveLevel() == min(level, logging.INFO)
    assert log_setup.shows(rlexp_logger, logging.INFO) == (level <= logging.INFO)
    assert log_setup.shows(rlexp_logger, logging.DEBUG) == (level == logging.DEBUG)
    assert log_setup.shows(rlexp_logger, logging.WARNING)


def test_a_hydra_app_takes_its_flags_off_the_command_line(rlexp_logger: logging.Logger) -> None:
    argv = ["rlexp", "-m", "-q", "trainer.beta=0,1", "--verbose", "--cfg", "job"]
    log_setup.take_level_flags(argv)
    assert argv == ["rlexp", "-m", "trainer.beta=0,1", "--cfg", "job"]
    assert log_setup.shows(rlexp_logger, logging.DEBUG)
    log_setup.take_level_flags(argv)  # cli.run takes them again after rlexp.__main__ did: nothing changes
    assert log_setup.shows(rlexp_logger, logging.DEBUG)


# --- argparse commands, typed as `rlexp report ...` and as `python -m rlexp.report ...`


def test_report_status_line_and_its_flags(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    args = [str(FIXTURE), "--out", str(page)]
    plain, quiet, verbose = rlexp("report", *args), rlexp("report", "-q", *args), rlexp("report", *args, "--verbose")
    assert plain.returncode == quiet.returncode == verbose.returncode == 0, plain.stderr
    assert plain.stdout == quiet.stdout == verbose.stdout == ""  # status lines are not output
    assert plain.stderr == f"report: {page} (5 runs)\n"
    assert page.read_text().startswith("<!DOCTYPE html>")  # the console script wrote the page
    assert quiet.stderr == ""
    assert verbose.stderr.splitlines() == [
        f"rlexp: debug: report: 5 runs from {FIXTURE}, ranked by eval.after.pass_at_1",
        f"report: {page} (5 runs)",
    ]


def test_quiet_keeps_the_one_line_error(tmp_path: Path) -> None:
    out = rlexp("report", "-q", str(tmp_path / "nope"))
    assert out.returncode == 2 and out.stderr.startswith(f"rlexp: error: {tmp_path / 'nope'}: no such run")


# --- the Hydra apps: `rlexp` (python -m rlexp) and `rlexp validate`


def test_cfg_job_shows_a_debug_line_under_v_only(tmp_path: Path) -> None:
    """The same command without a flag (nothing on stderr) is tests/test_console.py's
    test_cfg_job_prints_the_config."""
    verbose = rlexp("-v", "--cfg", "job", "trainer.beta=0.1", cwd=tmp_path)
    quiet = rlexp("--cfg", "job", "trainer.beta=0.1", "-q", cwd=tmp_path)
    assert verbose.returncode == quiet.returncode == 0, verbose.stderr
    assert quiet.stderr == ""
    assert verbose.stderr == (
        "rlexp: debug: --cfg: 1 override(s) composed and checked against the schema: ['trainer.beta=0.1']\n"
    )
    # Hydra never saw the flags: the same config, read as YAML
    assert verbose.stdout == quiet.stdout and yaml.safe_load(verbose.stdout)["trainer"]["beta"] == 0.1


def test_a_refused_override_is_one_line_under_every_flag(tmp_path: Path) -> None:
    for flag in ("-q", "-v"):
        out = rlexp(flag, "trainer.learning_rat=1", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
        assert out.returncode == 2, flag
        assert out.stderr.splitlines() == [
            "rlexp: error: trainer.learning_rat='1': no such key; did you mean trainer.learning_rate?"
        ], flag


def test_a_multirun_under_q_shows_no_sweep_table_but_its_error(tmp_path: Path) -> None:
    out = rlexp(
        "-q", "-m", "trainer.learning_rate=1e-6,x", "logger=none", f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path
    )
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "rlexp: error: trainer.learning_rate='x': Value 'x' of type 'str' could not be converted to Float; give a float"
    ]


@pytest.mark.slow
def test_validate_under_v_logs_plain_lines_to_the_console_and_its_log(tmp_path: Path) -> None:
    """A Hydra job: conf/config.yaml's job_logging sends rlexp's records to the console as plain lines and to the
    run's validate.log with time and level; the report and its "wrote" line stay on stdout under every flag, and
    stderr holds nothing but what the flags ask for (a failing preflight adds its one error line). The same
    command without a flag (empty stderr, no validate.log) is tests/test_validate.py's
    test_cli_with_given_completions: one validate process fewer."""
    runs = {flag: tmp_path / flag.strip("-") for flag in ("-q", "-v")}
    outs = {
        flag: rlexp("validate", flag, *VALIDATE, f"hydra.run.dir={run}", cwd=tmp_path) for flag, run in runs.items()
    }
    debug = f"preflight of 8 rows, completions {RECIPES / 'omi2_completions.jsonl'}"
    for flag, out in outs.items():
        assert out.returncode == 0, out.stderr[-2000:]
        assert "rlexp: preflight passed" in out.stdout and f"rlexp: wrote {runs[flag]}/validation.json" in out.stdout
        assert json.loads((runs[flag] / "validation.json").read_text())["ok"]
    assert outs["-q"].stderr == ""
    assert outs["-v"].stderr == f"rlexp: debug: {debug}\n"  # no [time][module][level] prefix on the console
    assert f"[rlexp.validate][DEBUG] - {debug}\n" in (runs["-v"] / "validate.log").read_text()


@pytest.mark.slow
def test_a_training_run_under_q_prints_nothing_and_logs_everything(tmp_path: Path) -> None:
    short = ["trainer.max_steps=2", "trainer.eval_every=2", "trainer.checkpoint_every=2", "trainer.eval_prompts=16"]
    out = rlexp("-q", *short, "trainer.eval_samples=2", "logger=none", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr == "" and out.stdout == ""  # no progress, no summary, no absl or JAX INFO lines
    log = (tmp_path / "main.log").read_text()
    assert "[rlexp.train.session][INFO] - rlexp: step 2/2 reward" in log
    assert "rlexp run tiny-arith-grpo: completed after 2 steps" in log
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"


def test_other_libraries_below_warning_stay_hidden_unless_asked(monkeypatch) -> None:  # noqa: ANN001

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert log_setup.LibraryHandler().level == logging.WARNING  # datasets', absl's and jax's INFO lines
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    assert log_setup.LibraryHandler().level == logging.NOTSET
    monkeypatch.delenv("HYDRA_FULL_ERROR")
    hub = logging.getLogger("huggingface_hub")
    before = hub.level
    with log_setup.quiet_libraries("huggingface_hub"):
        assert not hub.isEnabledFor(logging.WARNING)  # a download's retry warnings, summed up by rlexp's error
    assert hub.level == before
    conf = (REPO / "conf" / "config.yaml").read_text()
    assert "class: rlexp.log_setup.LibraryHandler" in conf
