"""Shared test helpers: compose rlexp configs in-process, exactly as `python -m rlexp` does."""

from __future__ import annotations

import copy
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from rlexp.config.load import CONF_DIR, to_config
from rlexp.config.schema import RlexpConfig

REPO = Path(__file__).resolve().parent.parent

# A run of the tiny default short enough for tests (compile dominates: ~10 s on 2 cores).
SHORT = [
    "trainer.max_steps=8",
    "trainer.eval_every=4",
    "trainer.checkpoint_every=4",
    "trainer.eval_prompts=16",
    "trainer.eval_samples=2",
    "logger=none",
]


def running(pid: int) -> bool:
    """Alive and not a zombie (exited, not yet reaped); a process that exits between the two checks is gone."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def rlexp_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (os.environ when None) with this checkout first on PYTHONPATH (rlexp and launchers/hydra_plugins),
    so a subprocess imports the code under test whatever the venv's install points at."""
    out = dict(os.environ if env is None else env)
    first = [str(REPO), str(REPO / "launchers")]
    rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p not in first]
    out["PYTHONPATH"] = os.pathsep.join([*first, *rest])
    return out


def rlexp_command(*args: str, module: str = "rlexp", python: Sequence[str] = ()) -> list[str]:
    """`python [python flags] -m <module> <args>` with this interpreter."""
    return [sys.executable, *python, "-m", module, *args]


def run_rlexp(
    *args: str,
    module: str = "rlexp",
    cwd: Path | str = REPO,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    check: bool = False,
    python: Sequence[str] = (),
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m <module> <args>` (rlexp's command, or rlexp.validate, rlexp.report, ...) as a user types it,
    in `cwd` with `env` (see rlexp_env); text, stdout and stderr captured unless `kwargs` redirect them.
    `check`: assert it exited 0, with the end of its stderr as the message."""
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs["capture_output"] = True
    proc = subprocess.run(
        rlexp_command(*args, module=module, python=python), cwd=cwd, env=rlexp_env(env), text=True,
        timeout=timeout, check=False, **kwargs,
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, (proc.stderr or proc.stdout or "")[-3000:]
    return proc


def start_rlexp(
    *args: str,
    module: str = "rlexp",
    cwd: Path | str = REPO,
    env: Mapping[str, str] | None = None,
    python: Sequence[str] = (),
    **kwargs: Any,
) -> subprocess.Popen:
    """`python -m <module> <args>` started in the background (subprocess.Popen's `kwargs`), as run_rlexp runs it."""
    return subprocess.Popen(rlexp_command(*args, module=module, python=python), cwd=cwd, env=rlexp_env(env), **kwargs)


def ctrl_c_twice(proc: subprocess.Popen) -> None:
    """Two Ctrl-C, the second once the first was delivered: the kernel keeps one pending SIGINT, so two sent
    before the process ran (a loaded machine) would be one. A person's second press comes far later."""
    import time

    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _sigint_pending(proc.pid):
        time.sleep(0.002)
    time.sleep(0.02)
    proc.send_signal(signal.SIGINT)


def _sigint_pending(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    masks = [int(ln.split()[1], 16) for ln in status.splitlines() if ln.startswith(("ShdPnd:", "SigPnd:"))]
    return any(m & (1 << (signal.SIGINT - 1)) for m in masks)


_COMPOSED: dict[tuple[str, ...], DictConfig] = {}


def compose_cfg(overrides: list[str] | None = None) -> DictConfig:
    """conf/ composed with `overrides`, a copy of its own. The suite composes the same overrides again and again (85
    of 269 compositions of the fast tier), and one composition takes ~0.2 s: each is composed once. Interpolations
    (`${oc.env:…}`, `${now:…}`) stay unresolved in the copy, read where the test reads them, as before."""
    key = tuple(overrides or [])
    if key not in _COMPOSED:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            _COMPOSED[key] = compose("config", overrides=list(key))
    return copy.deepcopy(_COMPOSED[key])


def compose_conf(overrides: list[str] | None = None) -> RlexpConfig:
    return to_config(compose_cfg(overrides))


def conf_options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (benchmarks/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def compiled_programs(run_dir: Path, modules: str, steps: int = 2) -> dict[str, str]:
    """Run `python -m rlexp` as typed (SHORT, cut to `steps`) with XLA dumping the programs whose names match the
    regex `modules`; their optimized HLO text by file name (`*after_optimizations.txt`)."""
    dump = run_dir / "hlo"
    flags = f"--xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*({modules}).*"
    cut = [f"trainer.max_steps={steps}", f"trainer.eval_every={steps}", f"trainer.checkpoint_every={steps}"]
    run_rlexp(*SHORT, *cut, f"hydra.run.dir={run_dir / 'run'}", env={**os.environ, "XLA_FLAGS": flags}, check=True)
    return {p.name: p.read_text() for p in dump.glob("*after_optimizations.txt")}


def in_eval() -> bool:
    """Whether a test's reward function is scoring an eval (which scores through the run's rewards too), not a
    training step: an eval's frame (rlexp/train/evaluate.py) is on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(os.path.join("rlexp", "train", "evaluate.py")):
            return True
        frame = frame.f_back
    return False


def sigterm_at_progress(*args: str, step_line: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Start `python -m rlexp <args>` (in `env`), send SIGTERM once its stderr shows `step_line` (off a terminal,
    progress is a line per 10 % of the run), as an eviction would; (exit status, the rest of stderr)."""
    proc = start_rlexp(*args, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        if line.startswith(step_line):
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    return proc.wait(timeout=300), rest


# An object that sends its own process SIGTERM when interpreter teardown frees it.
_LATE_SIGTERM = """import os, signal
class _Late:
    def __del__(self, _kill=os.kill, _pid=os.getpid()):
        _kill(_pid, signal.SIGTERM)
late = _Late()
"""


def sigterm_in_teardown(folder: Path, **extra: str) -> dict[str, str]:
    """os.environ (plus `extra`) for a process that receives SIGTERM while the interpreter would tear down, as a
    pod whose peer stopped the run first gets its own SIGTERM late: a sitecustomize in `folder` arranges it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_LATE_SIGTERM)
    return {**os.environ, **extra, "PYTHONPATH": str(folder)}
