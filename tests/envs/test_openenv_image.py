"""env.image: the container rlexp starts is removed when rlexp ends, however it ends, SIGKILL included.

This machine has no Docker engine, so tests/envs/fake_docker/docker stands in for the CLI and its daemon with the
one property that matters here: the container (the guessing game's server) belongs to the daemon, and killing the
`docker run` client that rlexp started leaves it running. rlexp's reaper (rlexp.envs.openenv_server) must remove it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.envs.test_openenv import BASE
from tests.helpers import REPO, run_rlexp, running, start_rlexp

pytestmark = pytest.mark.slow

FAKE = REPO / "tests" / "envs" / "fake_docker"


def docker_env(state: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{FAKE}{os.pathsep}{os.environ['PATH']}",
        "FAKE_DOCKER_STATE": str(state),
        "FAKE_DOCKER_PYTHON": sys.executable,
    }


def containers(state: Path) -> dict[str, tuple[int, int]]:
    """The fake daemon's running containers: name -> (pid, host port)."""
    out = {}
    for record in state.glob("*.pid") if state.exists() else []:
        pid, port = record.read_text().split()
        out[record.stem] = (int(pid), int(port))
    return out


def serving(port: int) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/health", timeout=2):
            return True
    except OSError:
        return False


def naming(container: str) -> list[int]:
    """Processes whose command line names the container (its reaper, while it lives)."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if container.encode() in (proc / "cmdline").read_bytes() and running(int(proc.name)):
                out.append(int(proc.name))
        except OSError:
            continue
    return out


def wait_for(what, timeout_s: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_finished_command_removes_its_container(tmp_path: Path) -> None:
    state = tmp_path / "docker"
    proc = run_rlexp(*BASE, "env.image=guess:test", f"hydra.run.dir={tmp_path / 'run'}", module="rlexp.validate",
                     env=docker_env(state), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "validation.json").is_file()
    (name,) = (state / "started").read_text().split()
    assert containers(state) == {}, "the container outlived `rlexp validate`"
    assert not naming(name), "its reaper outlived `rlexp validate`"


def test_a_sigkilled_run_leaves_no_container_running(tmp_path: Path) -> None:
    state = tmp_path / "docker"
    run = start_rlexp(*BASE, "env.image=guess:test", "trainer.max_steps=1000", "trainer.epochs=1000", "trainer.eval_every=1000", "trainer.checkpoint_every=1000",
                      "logger=none", f"hydra.run.dir={tmp_path / 'run'}", env=docker_env(state))  # fmt: skip
    try:
        wait_for(lambda: len(containers(state)) == 1 or run.poll() is not None, 300)
        assert run.poll() is None, "the run ended before its container started"
        ((name, (pid, port)),) = containers(state).items()
        wait_for(lambda: serving(port), 120)  # the run reached it: the weights load, then it trains
        time.sleep(2.0)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    # the daemon's container survived the client's death; only the reaper can remove it
    wait_for(lambda: not running(pid) and not containers(state), 60)
    assert not serving(port)
    wait_for(lambda: not naming(name), 30)  # and the reaper is gone too
