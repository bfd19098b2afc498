"""env.image against a real container engine: Podman under the `docker` name (tests/envs/container.py), running an
image of the guessing game built offline. The user's command trains on the container's rewards and removes it at
the end; a run SIGKILLed mid-training leaves its container to rlexp's reaper (`docker rm -f`), which removes it.
test_openenv_image.py checks the same with a stand-in CLI, on machines without an engine."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.envs.container import IMAGE, engine_env, guess_image, podman
from tests.envs.test_openenv import BASE
from tests.envs.test_openenv_image import naming, serving, wait_for
from tests.helpers import run_rlexp, start_rlexp

pytestmark = pytest.mark.slow

PREFIX = "rlexp-openenv-"  # rlexp.envs.openenv_server names its containers rlexp-openenv-<pid>-<port>
RUN = [
    *BASE,
    f"env.image={IMAGE}",
    "env.start_timeout_s=120",
    "trainer.eval_every=1000",
    "trainer.checkpoint_every=1000",
    "logger=none",
    # the shapes of tests/envs/test_openenv_training.py's runs (their compiled programs): 16 episodes a step
    "agent.max_turn_tokens=4",
    "trainer.batch_size=4",
    "trainer.num_generations=4",
    "env.eval_size=9",
    "trainer.eval_prompts=9",
    "trainer.eval_samples=1",
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment a run uses Podman in, with the game's image built (once, while its sources stay the same)."""
    env = engine_env(tmp_path_factory.mktemp("podman"))
    guess_image(env, tmp_path_factory.mktemp("image"))
    return env


def containers(env: dict[str, str], *flags: str) -> list[str]:
    """Names of rlexp's containers, running (`-a`: any state)."""
    out = podman(env, "ps", *flags, "--filter", f"name=^{PREFIX}", "--format", "{{.Names}}")
    return out.split()


def created(env: dict[str, str]) -> set[str]:
    """rlexp's containers ever created with this engine configuration (its own events log)."""
    out = podman(env, "events", "--stream=false", "--filter", "event=create", "--format", "{{.Name}}")
    return {name for name in out.split() if name.startswith(PREFIX)}


def test_the_command_trains_on_the_containers_rewards_and_removes_it(engine: dict[str, str], tmp_path: Path) -> None:
    before = created(engine)
    run_rlexp(
        *RUN,
        "trainer.max_steps=2",
        "trainer.epochs=2",
        f"hydra.run.dir={tmp_path / 'run'}",
        env=engine,
        check=True,
        timeout=900,
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rewards/openenv/mean" in r]
    assert [r["step"] for r in steps] == [1, 2], rows
    assert all("env/openenv/reward_mean" in r and "env/openenv/latency_mean_s" in r for r in steps), steps
    (name,) = created(engine) - before  # the run started one container, and it is gone
    assert name not in containers(engine, "-a")
    assert not naming(name), "its reaper outlived the run"


def test_a_sigkilled_run_leaves_its_container_to_the_reaper(engine: dict[str, str], tmp_path: Path) -> None:
    run = start_rlexp(*RUN, "trainer.max_steps=1000", "trainer.epochs=1000",
                      f"hydra.run.dir={tmp_path / 'run'}", env=engine)  # fmt: skip
    try:
        wait_for(lambda: containers(engine) or run.poll() is not None, 300)
        assert run.poll() is None, "the run ended before its container started"
        (name,) = containers(engine)
        port = int(name.rsplit("-", 1)[1])
        wait_for(lambda: serving(port), 120)  # the run reached it: the weights load, then it trains
        time.sleep(2.0)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    try:  # the engine's container survived its client's death; only the reaper removes it
        wait_for(lambda: name not in containers(engine, "-a"), 60)
        assert not serving(port)
        wait_for(lambda: not naming(name), 30)  # and the reaper is gone too
    finally:  # a reaper that failed leaves no container running after the test
        if name in containers(engine, "-a"):
            podman(engine, "rm", "-f", name)
