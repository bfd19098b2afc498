"""The `rlexp` console script as a user types it: `rlexp <overrides>` is `python -m rlexp`, `rlexp <command>` is
`python -m rlexp.<module>`, with the same output, one-line errors and exit statuses.

They run the console script pip installed next to the interpreter (`make run` and `make test` install it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from rlexp.console import COMMANDS
from tests.helpers import REPO, run_rlexp

FIXTURE = REPO / "tests" / "fixtures" / "runs" / "lr_seed"


SCRIPT = Path(sys.executable).with_name("rlexp")


def rlexp(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`rlexp <args>` in a shell: the installed console script."""
    assert SCRIPT.exists(), f"{SCRIPT} is missing: pip install -e . (make run does) installs the console script"
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def python_m(module: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`python -m <module> <args>` in a shell."""
    return run_rlexp(*args, module=module, cwd=cwd, timeout=300)


def test_pyproject_names_the_console_function() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"rlexp": "rlexp.console:main"}
    assert "from rlexp.console import main" in SCRIPT.read_text()  # the installed script runs that function


def test_help_lists_the_commands_beside_the_config_groups() -> None:
    out = rlexp("--help")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    lines = out.stdout.splitlines()
    commands = lines[lines.index("commands (rlexp <command> --help for each):") + 1 :]
    listed = [ln.split()[0] for ln in commands[: commands.index("")]]
    assert listed == list(COMMANDS)  # every command the dispatcher knows, nothing else
    assert "\ntrainer (default: grpo)" in out.stdout and "\nmodel (default: tiny)" in out.stdout
    for flag in ("-q, --quiet", "-v, --verbose", "--debug"):
        assert any(ln.strip().startswith(flag) for ln in lines), flag
    assert python_m("rlexp", "--help").stdout == out.stdout


# validate's --help is Hydra's app help, which composes the config once per group option (~2.5 s on 2 cores)
@pytest.mark.parametrize(
    "command", [pytest.param(c, marks=pytest.mark.slow) if c == "validate" else c for c in sorted(COMMANDS)]
)
def test_a_command_help_is_its_module_help(command: str) -> None:
    typed = rlexp(command, "--help")
    module = python_m(COMMANDS[command], "--help")
    assert typed.returncode == module.returncode == 0, typed.stderr[-2000:]
    assert typed.stdout == module.stdout and typed.stdout.strip()
    if command != "validate":  # argparse commands; validate's --help is the Hydra app's
        assert "-q, --quiet" in typed.stdout and "-v, --verbose" in typed.stdout


def test_a_report_of_a_missing_dir_is_the_module_line_and_status(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    typed, module = rlexp("report", missing, cwd=tmp_path), python_m("rlexp.report", missing, cwd=tmp_path)
    assert typed.returncode == module.returncode == 2
    assert (
        typed.stderr
        == module.stderr
        == (f"rlexp: error: {missing}: no such run or sweep dir; give a sweep dir or run dirs that exist\n")
    )
    assert typed.stdout == ""


def test_cfg_job_prints_the_config(tmp_path: Path) -> None:
    # trainer.eval_k=4 (pass@1 and pass@4) was refused with OmegaConf's "AnyNode is not a ListConfig"
    overrides = ["trainer=dapo", "trainer.learning_rate=3e-6", "trainer.eval_k=4"]
    out = rlexp("--cfg", "job", *overrides, cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr  # no status line without -v (test_logging_flags)
    conf = yaml.safe_load(out.stdout)
    assert conf["trainer"]["algorithm"] == "dapo" and conf["trainer"]["learning_rate"] == 3e-6
    assert "  eval_k: 4\n" in out.stdout
    assert out.stdout == python_m("rlexp", "--cfg", "job", *overrides).stdout
    assert not list(tmp_path.iterdir()), "--cfg job made a run dir"


def test_a_mistyped_key_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = rlexp("trainer.learning_rat=1", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "rlexp: error: trainer.learning_rat='1': no such key; did you mean trainer.learning_rate?"
    ]
    assert not (tmp_path / "run").exists()


def test_debug_keeps_the_traceback(tmp_path: Path) -> None:
    out = rlexp("--debug", "trainer.learning_rat=1", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode != 0 and "Traceback (most recent call last)" in out.stderr


@pytest.mark.parametrize("word", ["reprot", "serve_reward", "help"])
def test_a_word_that_is_no_command_is_an_override_to_hydra(word: str, tmp_path: Path) -> None:
    """Only the listed commands dispatch: any other word is the Hydra app's, where a word without `=` fails in
    one line, as `python -m rlexp <word>` does."""
    typed, module = rlexp(word, cwd=tmp_path), python_m("rlexp", word, cwd=tmp_path)
    assert typed.returncode == module.returncode == 2
    assert typed.stderr == module.stderr
    assert typed.stderr.splitlines() == [
        f"rlexp: error: {word}: not a valid override (no = between the key and its value); write key=value, a sweep as "
        "key=a,b or key=range(1,4), and quote values holding , ( ) [ ] { } or spaces"
    ]


def test_a_multirun_refuses_a_bad_swept_value_in_one_line(tmp_path: Path) -> None:
    out = rlexp("-m", "trainer.learning_rate=1e-6,x", "logger=none", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert out.returncode == 2
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("rlexp: error:")]
    assert errors == [
        "rlexp: error: trainer.learning_rate='x': Value 'x' of type 'str' could not be converted to Float; give a float"
    ]
    assert out.stderr.rstrip().endswith(errors[0])
    manifest = json.loads((tmp_path / "sweep" / "sweep.json").read_text())  # refused once, before any job ran
    states = {j["num"]: j["state"] for j in manifest["jobs"]}
    assert manifest["state"] == "failed" and states == {0: "pending", 1: "failed"}


def test_a_usage_error_of_a_command_is_the_module_line() -> None:
    typed, module = rlexp("serve-reward", "--port", "x"), python_m("rlexp.serve_reward", "--port", "x")
    assert typed.returncode == module.returncode == 2
    assert (
        typed.stderr
        == module.stderr
        == "rlexp: error: --port=x: not an integer; see python -m rlexp.serve_reward --help\n"
    )
