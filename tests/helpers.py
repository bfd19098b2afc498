"""Shared test helpers: compose rlexp configs in-process, exactly as `python -m rlexp` does."""

from __future__ import annotations

import importlib.util
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
