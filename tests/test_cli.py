"""`python -m rlexp` as a user runs it: --cfg job without JAX, --help, one-line errors."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import yaml

from tests.helpers import REPO, run_rlexp, sigterm_in_teardown

PROBE = """
import runpy, sys
sys.argv = ["rlexp", *sys.argv[1:]]
try:
    runpy.run_module("rlexp", run_name="__main__", alter_sys=True)
finally:
    heavy = sorted(m for m in ("jax", "jaxlib", "tunix", "flax", "orbax") if m in sys.modules)
    print("HEAVY_MODULES=" + ",".join(heavy))
"""


def rlexp(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    return run_rlexp(*args, cwd=cwd, timeout=120)


def test_cfg_job_prints_config_without_importing_jax(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, "--cfg", "job", "trainer=dapo", "trainer.learning_rate=3e-6"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "algorithm: dapo" in out.stdout and "learning_rate: 3.0e-06" in out.stdout
    assert "HEAVY_MODULES=\n" in out.stdout, out.stdout.splitlines()[-1]
    printed = out.stdout.split("HEAVY_MODULES=")[0]
    assert "# memory per chip for tiny on cpu" in printed  # the estimate, as a YAML comment
    assert yaml.safe_load(printed)["trainer"]["algorithm"] == "dapo"  # still valid YAML
    assert not list(tmp_path.iterdir()), "--cfg job must not create a run dir"


def test_help_lists_every_group_and_option() -> None:
    out = rlexp("--help")
    assert out.returncode == 0
    for group in ("model", "dataset", "slice", "reward", "chat_template", "trainer", "logger", "experiment"):
        assert f"\n{group} (default:" in out.stdout, group
    for option, words in (("grpo", "GRPO"), ("dapo", "DAPO"), ("tiny", "Tiny Qwen3"), ("arith", "arithmetic")):
        line = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith(option + " "))
        assert words.lower() in line.lower(), line


def test_invalid_config_is_one_line_and_exit_2(tmp_path) -> None:
    out = rlexp("trainer.eval_every=10", "trainer.checkpoint_every=15", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 2
    errors = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert errors == [
        "rlexp: error: trainer.checkpoint_every=15: must be a multiple of trainer.eval_every=10 so every checkpoint has an eval"
    ], out.stderr
    assert "Traceback" not in out.stderr


def test_unset_required_value_is_one_line(tmp_path) -> None:
    out = rlexp("model.num_layers=???", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "model.num_layers='???': this option needs a value" in out.stderr


def test_full_error_env_keeps_traceback(tmp_path) -> None:
    out = run_rlexp(
        "trainer.num_generations=1", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path, timeout=120,
        env={**__import__("os").environ, "HYDRA_FULL_ERROR": "1"},
    )  # fmt: skip
    assert out.returncode != 0 and "Traceback" in out.stderr and "ConfigError" in out.stderr


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("model=nope", "model='nope': no such option; use one of gemma4_26b_a4b, gemma4_e2b, gemma4_e4b,"),
        (
            "trainer.learning_rate=abc",
            "trainer.learning_rate='abc': Value 'abc' of type 'str' could not be converted to Float",
        ),
        # a mistyped key is tests/test_console.py's test_a_mistyped_key_is_one_line_and_exit_2 (the whole stderr
        # pinned); +trainer.learning_rat=1e-3 is PRECHECKED below (also checks nothing was written)
    ],
)
def test_composition_errors_are_one_line(override: str, line: str, tmp_path) -> None:
    out = rlexp(override, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    errors = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert errors[0].startswith(f"rlexp: error: {line}") and "_schema" not in errors[0]


def test_cfg_prints_the_memory_estimate_of_a_tpu_run() -> None:
    out = rlexp("--cfg", "job", "model=gpt_oss_20b", "slice=v5p-64")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].startswith("# memory per chip for gpt_oss_20b on v5p-64 (16 trainer chips")


EXIT_PROBE = """
import atexit, os, signal, sys
from rlexp import cli

cli.skip_teardown()
atexit.register(lambda: open(sys.argv[1] + "/handler", "w").write("ran"))  # a library's exit handler
signal.signal(signal.SIGTERM, lambda *_: None)  # as rlexp.train.hooks keeps one after training


class Finalized:  # stands for what interpreter teardown frees (modules, jitted programs): it takes a while,
    def __del__(self, _open=open, _path=sys.argv[1] + "/teardown", _kill=os.kill):  # builtins may be gone
        _open(_path, "w").write("ran")
        _kill(os.getpid(), signal.SIGTERM)  # and a pod's SIGTERM may arrive meanwhile


keep = Finalized()
sys.stdout.write("buffered, no newline")  # stdout is a pipe: block-buffered until the exit flush
if sys.argv[2] == "ok":
    cli.mark_exit_status(0)
elif sys.argv[2] == "stopped":
    cli.mark_exit_status(143)
    sys.exit(143)
else:
    raise RuntimeError("a bug")
"""


@pytest.mark.parametrize(("outcome", "status"), [("ok", 0), ("stopped", 143), ("bug", -signal.SIGTERM)])
def test_a_decided_exit_status_skips_teardown_after_every_exit_handler(outcome: str, status: int, tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, str(tmp_path), outcome], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == status, out.stderr
    assert out.stdout == "buffered, no newline"
    assert (tmp_path / "handler").read_text() == "ran"  # exit handlers registered later still run
    # a decided status ends before teardown; a traceback tears down as usual, where Python has restored every
    # signal's default action: the SIGTERM kills it, whatever handler the program had
    assert (tmp_path / "teardown").exists() == (outcome == "bug")


def test_a_sigterm_during_teardown_leaves_the_commands_status(tmp_path) -> None:
    """A refused run ends with its own status when SIGTERM arrives while the interpreter would tear down."""
    env = sigterm_in_teardown(tmp_path / "site")
    out = run_rlexp("trainer.batch_size=0", f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith("rlexp: error: trainer.batch_size=0")


# Each mistake rlexp.config.overrides finds before Hydra composes, as the user meets it: the one line in rlexp's
# own words (no sentence of Hydra's in it), exit status 2, nothing written.
PRECHECKED = [
    ("trainer.beta", "trainer.beta: not a valid override (no = between the key and its value); write key=value"),
    ("model=qwen3_06b", "model='qwen3_06b': no such option; did you mean qwen3_0_6b? use one of gemma4_26b_a4b"),
    ("+trainer.learning_rat=1e-3", "trainer.learning_rat=0.001: no such key; did you mean trainer.learning_rate?"),
    ("trainer.max_steps=1.5", "trainer.max_steps='1.5': Value '1.5' of type 'float' could not be converted to "),
    ("trainer.beta=0,0.04", "trainer.beta=0,0.04: a sweep, one job per value; add -m (--multirun) to run them"),
    ("model=null", "model=None: a group takes one option's name; use one of"),
]


@pytest.mark.parametrize(("override", "line"), PRECHECKED)
@pytest.mark.parametrize("module", ["rlexp", "rlexp.validate"])
def test_a_bad_override_is_refused_before_hydra(override: str, line: str, module: str, tmp_path) -> None:
    out = run_rlexp(override, f"hydra.run.dir={tmp_path}/run", module=module, cwd=tmp_path, timeout=120)
    errors = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert errors[0].startswith(f"rlexp: error: {line}"), errors[0]
    assert not list(tmp_path.iterdir()), "a refused command wrote files"


def test_cfg_job_refuses_a_wrong_type_before_composing(tmp_path) -> None:
    out = rlexp("--cfg", "job", "trainer.eval_k=[1,x]", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert out.stderr.splitlines() == [
        "rlexp: error: trainer.eval_k='[1,x]': 'x' is not an integer; give null (each power of two up to "
        "trainer.eval_samples), an integer k or a list of them, e.g. [1,4]"
    ]


# `--cfg job trainer.eval_k=4` (once refused as "AnyNode is not a ListConfig"): tests/test_console.py's
# test_cfg_job_prints_the_config runs it with the console script and python -m rlexp.


def test_a_free_form_key_hydra_cannot_set_says_how_to_add_it(tmp_path) -> None:
    """Only the composed config knows a free-form dict's keys: Hydra's refusal (a pinned text) becomes the fix."""
    out = rlexp("--cfg", "job", "reward.functions.0.kwargs.model=judge", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "rlexp: error: reward.functions.0.kwargs.model='judge': not in this config yet; "
        "add it with +reward.functions.0.kwargs.model=judge"
    ]


@pytest.mark.parametrize(
    "override, key",
    [("cost.price_per_chip_hour=-1", "cost.price_per_chip_hour"), ("model.max_context=0", "model.max_context")],
)
def test_cfg_job_refuses_a_bad_value_as_the_run_would(override: str, key: str, tmp_path) -> None:
    """`--cfg job` checks single keys' values (rlexp.config.values) before printing, as `rlexp validate` and a
    run do: a negative price or a zero model size is one line naming the key, not a printed config."""
    out = rlexp(override, "--cfg", "job", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", out.stdout[-500:]
    assert out.stderr.startswith(f"rlexp: error: {key}=") and len(out.stderr.strip().splitlines()) == 1, out.stderr
