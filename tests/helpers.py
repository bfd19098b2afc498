"""Shared test helpers: compose rlexp configs in-process, exactly as `python -m rlexp` does."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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


def compose_cfg(overrides: list[str] | None = None) -> DictConfig:
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("config", overrides=overrides or [])


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
    proc = subprocess.run(
        [sys.executable, "-m", "rlexp", *SHORT, *cut, f"hydra.run.dir={run_dir / 'run'}"],
        cwd=REPO,
        env={**os.environ, "XLA_FLAGS": flags},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {p.name: p.read_text() for p in dump.glob("*after_optimizations.txt")}
