"""A Slurm that cannot take the jobs fails in one line naming the setting and its fix, before anything is written
into the sweep dir; a cpu-2x1 run started without a launcher says how to start it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_rlexp

pytestmark = pytest.mark.timeout(600)


def sweep(sweep_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["-m", "hydra/launcher=slurm", "seed=0,1", *args, f"hydra.sweep.dir={sweep_dir}"]
    return run_rlexp(*cmd, env=env, timeout=300)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlexp: error: "), done.stderr
    return lines[0]


def test_an_unknown_partition(local_slurm: str, tmp_path: Path) -> None:
    done = sweep(tmp_path / "s", "slice=cpu-2x1", "hydra.launcher.partition=gpu")
    assert done.returncode == 2 and not (tmp_path / "s").exists()
    assert one_line(done) == (
        "rlexp: error: hydra.launcher.partition='gpu': no such Slurm partition; use one of local (sinfo -s)"
    )


def test_a_slice_larger_than_the_partition(local_slurm: str, tmp_path: Path) -> None:
    done = sweep(tmp_path / "s", "slice=gpu-2x8xh200")
    assert done.returncode == 2 and not (tmp_path / "s").exists()
    assert one_line(done) == (
        "rlexp: error: hydra.launcher.nodes=2: the slice's 2 nodes do not fit: partition local (the default) has 1; "
        "pick a smaller slice or another partition"
    )


def test_a_controller_that_does_not_answer(local_slurm: str, tmp_path: Path) -> None:
    """The local cluster's slurm.conf with the controller moved to a port nothing listens on."""
    conf = Path(os.environ.get("RLEXP_SLURM_DIR", "/tmp/rlexp-slurm")) / "slurm.conf"
    moved = tmp_path / "slurm.conf"
    moved.write_text(
        "\n".join("SlurmctldPort=1" if ln.startswith("SlurmctldPort=") else ln for ln in conf.read_text().splitlines())
    )
    done = sweep(tmp_path / "s", "slice=cpu-2x1", env={**os.environ, "SLURM_CONF": str(moved)})
    assert done.returncode == 1 and not (tmp_path / "s").exists()
    line = one_line(done)
    assert line.startswith(f"rlexp: error: Slurm controller (SlurmctldHost in {moved}): not answering (scontrol ping: ")
    assert "is DOWN" in line and line.endswith("on this machine, scripts/local_slurm.sh up starts a one-node Slurm)")
    done = sweep(tmp_path / "s", "slice=cpu-2x1", env={**os.environ, "SLURM_CONF": str(tmp_path / "none.conf")})
    assert done.returncode == 1 and f"SLURM_CONF={tmp_path / 'none.conf'}: no such file" in one_line(done)


def test_no_slurm_commands(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # this Python, and no Slurm
    done = sweep(tmp_path / "s", "slice=cpu-2x1", env=env)
    assert done.returncode == 2 and not (tmp_path / "s").exists()
    assert one_line(done) == (
        "rlexp: error: hydra/launcher=slurm: sbatch, squeue, scontrol, sinfo, scancel not found on PATH; run from a "
        "Slurm login node, install the Slurm client (Debian: apt-get install slurm-client); on this machine, "
        "scripts/local_slurm.sh up starts a one-node Slurm"
    )


def test_cpu_2x1_without_a_launcher_says_how_to_start_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_", "JAX_", "RLEXP_IN"))}
    done = run_rlexp("slice=cpu-2x1", "trainer.max_steps=1", f"hydra.run.dir={tmp_path}", env=env, timeout=300)
    assert done.returncode == 2
    assert one_line(done) == (
        "rlexp: error: slice='cpu-2x1': runs as 2 JAX processes that a launcher starts together: "
        "python -m rlexp -m hydra/launcher=slurm slice=cpu-2x1 ... , or inside a Slurm allocation "
        "srun -n 2 python -m rlexp slice=cpu-2x1 ... (scripts/local_slurm.sh up starts a Slurm on this machine)"
    )
