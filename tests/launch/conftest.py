"""Fixtures: a Hydra GKE launcher built in-process, and a loopback Kubernetes API server with a kubeconfig."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch.fake_apiserver import FakeApiServer

TEST_IMAGE = "us-docker.pkg.dev/test-project/rlexp/rlexp@sha256:" + "0" * 64


@pytest.fixture
def make_launcher() -> Iterator[object]:
    """make_launcher(sweep_dir, *overrides) -> a set-up GkeLauncher, as Hydra's multirun would build it."""
    from hydra import initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.plugins import Plugins
    from hydra.types import HydraContext, RunMode

    from rlexp.config.load import CONF_DIR

    ctx = initialize_config_dir(config_dir=CONF_DIR, version_base=None)
    ctx.__enter__()

    def build(sweep_dir: Path, *overrides: str) -> object:
        loader = GlobalHydra.instance().config_loader()
        config = loader.load_configuration(
            "config", [*overrides, f"hydra.sweep.dir={sweep_dir}"], run_mode=RunMode.MULTIRUN
        )
        hc = HydraContext(config_loader=loader, callbacks=Callbacks(config))
        launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hc, task_function=lambda c: None, config=config
        )
        return launcher

    yield build
    ctx.__exit__(None, None, None)


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    """A loopback API server; KUBECONFIG points at it (context `loopback`); RLEXP_IMAGE names a pushed image
    (submitting the placeholder rlexp:latest is refused)."""
    with FakeApiServer() as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
        monkeypatch.setenv("RLEXP_IMAGE", TEST_IMAGE)
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield server


def run_cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """`python -m rlexp <args>` in-process (exit code; 0 when it returns)."""
    from rlexp.__main__ import entry

    monkeypatch.setattr(sys, "argv", ["rlexp", *args])
    try:
        entry()
    except SystemExit as e:
        return int(e.code or 0)
    return 0
