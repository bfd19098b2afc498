"""rlexp.compat.hydra.compose_once: Hydra's get_mode answers without composing where rlexp's config can set no
`hydra.mode`, and that answer is the one Hydra's own get_mode gives by composing."""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra

from rlexp import cli
from rlexp.compat import patching
from rlexp.compat.hydra import COMPOSE_ONCE, COMPOSE_ONCE_SWITCH
from rlexp.config.load import CONF_DIR, register_configs
from rlexp.config.overrides import MODE_GROUPS, may_set_hydra_mode
from tests.helpers import REPO, rlexp_command, rlexp_env

COMMANDS = [
    [],
    ["trainer.max_steps=3", "seed=1"],
    ["experiment=gemma4_e4b_omi2"],
    ["hydra/launcher=slurm", "slice=cpu-2x1"],
    ["trainer=ppo", "+trainer.nothere=1"],  # a config Hydra refuses: get_mode answers None too
    ["+sweep=optuna_lr"],
    ["+sweep=lr_beta", "trainer.max_steps=2"],
    ["hydra.mode=MULTIRUN"],
    ["trainer.beta@x=1"],
]


@pytest.fixture
def hydra() -> Hydra:
    register_configs()
    yield Hydra.create_main_hydra2(task_name="rlexp", config_search_path=create_config_search_path(str(CONF_DIR)))
    GlobalHydra.instance().clear()


@pytest.mark.parametrize("overrides", COMMANDS, ids=lambda o: " ".join(o) or "default")
def test_a_command_rlexp_calls_modeless_gets_none_from_hydra_s_own_compose(hydra: Hydra, overrides: list[str]) -> None:
    """Where rlexp would skip the compose (may_set_hydra_mode False), Hydra's own get_mode, composing, answers
    None; the sweep presets and a hydra.mode override are not skipped (their mode is MULTIRUN)."""
    own = patching.original(Hydra, "get_mode")(hydra, "config", list(overrides))
    assert may_set_hydra_mode(overrides) or own is None, own
    if own is not None:
        assert may_set_hydra_mode(overrides), overrides


def test_no_config_but_a_mode_group_s_sets_hydra_mode() -> None:
    """The list MODE_GROUPS holds every group whose options set hydra.mode: any other config in conf/ or the
    launchers' folders that did would make a skipped compose answer wrong."""
    setting = set()
    found = glob.glob(f"{CONF_DIR}/**/*.yaml", recursive=True)  # glob follows conf/sweep, a link to sweeps/
    for path in map(Path, [*found, *glob.glob(f"{REPO}/launchers/**/*.yaml", recursive=True)]):
        text = yaml.safe_load(path.read_text()) or {}
        global_pkg = "@package _global_" in path.read_text().splitlines()[0] or path.parent == Path(CONF_DIR)
        hydra_node = text.get("hydra") if global_pkg and isinstance(text, dict) else None
        if isinstance(hydra_node, dict) and "mode" in hydra_node:
            setting.add(path.relative_to(REPO).parts[1] if path.is_relative_to(CONF_DIR) else str(path))
    assert setting == set(MODE_GROUPS), setting


def test_the_checked_command_skips_the_mode_compose_and_the_switch_brings_it_back(
    hydra: Hydra, monkeypatch: pytest.MonkeyPatch
) -> None:
    composed: list[list[str]] = []
    real = Hydra.compose_config

    def counting(self: Hydra, config_name: str | None, overrides: list[str], *args: object, **kw: object) -> object:
        composed.append(list(overrides))
        return real(self, config_name, overrides, *args, **kw)

    monkeypatch.setattr(Hydra, "compose_config", counting)
    try:
        cli.check_command_line(["trainer.max_steps=3"])
        assert Hydra.get_mode(hydra, "config", ["trainer.max_steps=3"]) is None and composed == []
        assert Hydra.get_mode(hydra, "config", ["+sweep=lr_beta"]).name == "MULTIRUN"  # not the checked command
        assert len(composed) == 1
        cli.check_command_line(["+sweep=lr_beta"])  # a mode group: Hydra composes to read it
        assert Hydra.get_mode(hydra, "config", ["+sweep=lr_beta"]).name == "MULTIRUN" and len(composed) == 2
        monkeypatch.setenv(COMPOSE_ONCE_SWITCH, "0")
        cli.check_command_line(["trainer.max_steps=4"])
        assert COMPOSE_ONCE not in patching.installed()
        assert Hydra.get_mode(hydra, "config", ["trainer.max_steps=4"]) is None and len(composed) == 3
    finally:
        patching.uninstall(COMPOSE_ONCE)
        cli._checked = None


COUNTING = """import sys
from hydra._internal.hydra import Hydra
_compose = Hydra.compose_config
def compose_config(self, *args, **kwargs):
    sys.stderr.write("counted: a compose\\n")
    return _compose(self, *args, **kwargs)
Hydra.compose_config = compose_config
"""


@pytest.mark.parametrize(("switch", "composes"), [("1", 1), ("0", 2)])
def test_the_users_command_composes_once(switch: str, composes: int, tmp_path: Path) -> None:
    """`python -m rlexp trainer.max_steps=-1` as typed (refused once composed, exit 2): Hydra composes its config
    once; with RLEXP_HYDRA_COMPOSE_ONCE=0, twice (get_mode's, then the run's). A sitecustomize counts the composes."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(COUNTING)
    env = rlexp_env({**os.environ, COMPOSE_ONCE_SWITCH: switch})
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(tmp_path / "site")])
    cmd = rlexp_command("trainer.max_steps=-1", f"hydra.run.dir={tmp_path / 'run'}")
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "rlexp: error: trainer.max_steps=-1" in done.stderr, done.stderr
    assert done.stderr.count("counted: a compose") == composes, done.stderr
