"""A run into a full disk (a real 700 KB tmpfs) stops in one line naming the file and ENOSPC, keeps its newest
whole checkpoint and no temp files, records `failed`, and resumes from that checkpoint once space is freed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_failure_paths import one_line, rlexp

RUN = ["trainer.max_steps=10", "trainer.checkpoint_every=5", "trainer.eval_every=5", "logger=none"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(disk)], check=True)  # CI runs as root
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_the_run_resumes_once_space_is_freed(small_disk: Path) -> None:
    run = small_disk / "run"
    full = rlexp("-q", *RUN, f"hydra.run.dir={run}", cwd=small_disk.parent)
    warning, *rest = full.stderr.splitlines()  # the preflight saw it coming
    assert "the checkpoints need at least" in warning, full.stderr
    line = one_line(subprocess.CompletedProcess(full.args, full.returncode, full.stdout, "\n".join(rest)))
    assert full.returncode == 1 and "No space left on device (ENOSPC)" in line and str(run) in line, line
    assert "rerun to resume from step 5" in line
    actor = run / "checkpoints" / "actor"
    assert sorted(p.name for p in actor.iterdir()) == ["5"], "an unfinished checkpoint was left behind"
    assert not list(run.glob(".tmp-*")), "a temp file of an atomic write was left behind"
    assert json.loads((run / "summary.json").read_text())["status"] == "failed"
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)
    again = rlexp(*RUN, f"hydra.run.dir={run}", cwd=small_disk.parent)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming" in again.stderr and "from step 5" in again.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 10
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 10, "a metrics row is missing or twice"


def test_the_preflight_warns_when_the_checkpoints_cannot_fit(tmp_path: Path, monkeypatch, caplog) -> None:  # noqa: ANN001
    import shutil

    from rlexp.train import write_failure
    from tests.helpers import compose_conf

    conf = compose_conf(["trainer.checkpoint_every=5"])
    need = write_failure.checkpoint_bytes(conf) * (conf.trainer.keep_checkpoints + 1)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=need - 1))
    with caplog.at_level("WARNING", logger="rlexp.train"):
        write_failure.warn_if_low_space(conf, str(tmp_path))
    assert "the checkpoints need at least" in caplog.text and "2 kept + 1 being written" in caplog.text
    caplog.clear()
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=need))
    write_failure.warn_if_low_space(conf, str(tmp_path))
    assert caplog.text == ""
