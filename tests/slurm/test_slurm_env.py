"""Real Slurm and a real container engine: `python -m rlexp -m hydra/launcher=slurm env=openenv env.image=<image>`
on the one-node cluster of scripts/local_slurm.sh. The job starts the image itself with the node's `docker` CLI
(Podman under that name, tests/envs/container.py: the job inherits the submitting shell's environment, as sbatch
exports it), trains on the container's rewards, and removes the container when it ends."""

from __future__ import annotations

import json

import pytest

from tests.envs.container import engine_env, guess_image
from tests.envs.test_openenv_container import RUN, containers, created
from tests.helpers import run_rlexp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_a_slurm_job_runs_the_image_trains_on_it_and_removes_it(
    local_slurm: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    engine = engine_env(tmp_path_factory.mktemp("podman"))
    guess_image(engine, tmp_path_factory.mktemp("image"))  # RUN names it (env.image)
    sweep = tmp_path_factory.mktemp("slurm") / "sweep"
    before = created(engine)
    out = run_rlexp(
        "-m",
        "hydra/launcher=slurm",
        "slice=cpu",
        *RUN,
        "trainer.max_steps=2",
        "trainer.epochs=2",
        f"hydra.sweep.dir={sweep}",
        env=engine,
        timeout=900,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    manifest = json.loads((sweep / "sweep.json").read_text())
    assert [j["state"] for j in manifest["jobs"]] == ["completed"], manifest["jobs"]
    rows = [json.loads(line) for line in (sweep / "0" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rewards/openenv/mean" in r]
    assert [r["step"] for r in steps] == [1, 2], rows
    assert all("env/openenv/reward_mean" in r for r in steps), steps
    (name,) = created(engine) - before  # the job started one container, and removed it
    assert name not in containers(engine, "-a")
    assert json.loads((sweep / "0" / "summary.json").read_text())["status"] == "completed"
