"""wandb (offline) and TensorBoard trackers: files per run, run-id reuse on resume, metric names kept."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rlexp.config.load import flatten
from rlexp.tracking import NoTracker, make_tracker
from rlexp.tracking.wandb_tracker import resolve_mode
from tests.helpers import compose_conf

METRICS = {"rewards/sum": 0.5, "kl": 0.01, "completions/mean_length": 3.0}


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


def offline_runs(run_dir: Path, run_id: str) -> list[Path]:
    return sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}*"))


def wait_for_records(path: Path, needles: tuple[bytes, ...], timeout: float = 30.0) -> bool:
    """wandb's service may still be writing the offline file when finish() returns on a busy machine."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        data = path.read_bytes() if path.exists() else b""
        if all(n in data for n in needles):
            return True
        time.sleep(0.25)
    return False


def test_mode_is_offline_without_key(monkeypatch: pytest.MonkeyPatch, offline: None) -> None:
    assert resolve_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert resolve_mode("auto") == "offline"


def test_flatten_dotted_and_drops_secrets() -> None:
    flat = flatten({"trainer": {"beta": 0.04, "lora": {"rank": 0}}, "model": {"hf_token": "s3cret", "name": "m"}})
    assert flat == {"trainer.beta": 0.04, "trainer.lora.rank": 0, "model.name": "m"}


def test_none_logger_is_a_no_op(tmp_path: Path) -> None:
    tracker = make_tracker(compose_conf(["logger=none"]), tmp_path, {})
    assert isinstance(tracker, NoTracker)
    tracker.log(1, METRICS)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_wandb_offline_run_resumes_same_id(tmp_path: Path, offline: None) -> None:
    conf = compose_conf(["logger=wandb", "logger.tags=[unit]"])
    resolved = {"trainer": {"learning_rate": 0.001, "beta": 0.04}, "seed": 0}
    first = make_tracker(conf, tmp_path, resolved)
    for step in (1, 2, 3):
        first.log(step, METRICS)
    first.finish({"status": "interrupted", "objective": {"name": "eval.after.pass_at_1", "value": 0.25}}, 1)

    record = json.loads((tmp_path / "wandb_run.json").read_text())
    assert record["mode"] == "offline" and record["resumed"] is False
    run_id = record["id"]
    [first_dir] = offline_runs(tmp_path, run_id)
    assert (first_dir / f"run-{run_id}.wandb").stat().st_size > 0

    # The job restarts from its checkpoint at step 2: same wandb run, steps logged again under rl_step.
    second = make_tracker(conf, tmp_path, resolved)
    second.log(3, METRICS)
    second.finish({"status": "completed", "objective": {"name": "eval.after.pass_at_1", "value": 0.5}}, 0)
    again = json.loads((tmp_path / "wandb_run.json").read_text())
    assert again["id"] == run_id and again["resumed"] is True
    dirs = offline_runs(tmp_path, run_id)
    assert len(dirs) == 2, dirs
    assert wait_for_records(dirs[1] / f"run-{run_id}.wandb", (b"rl_step", b"rewards/sum"))


def test_two_jobs_in_one_process_get_two_runs(tmp_path: Path, offline: None) -> None:
    conf = compose_conf(["logger=wandb"])
    a = make_tracker(conf, tmp_path / "a", {})
    a.log(1, METRICS)  # no finish: a crashed job must not swallow the next job's run
    b = make_tracker(conf, tmp_path / "b", {})
    b.log(1, METRICS)
    b.finish({}, 0)
    ids = [json.loads((tmp_path / d / "wandb_run.json").read_text())["id"] for d in ("a", "b")]
    assert ids[0] != ids[1]


def test_tensorboard_scalars_keep_metric_names(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = make_tracker(compose_conf(["logger=tensorboard"]), tmp_path, {})
    for step in (1, 2):
        tracker.log(step, {**METRICS, "note": "text is skipped"})
    tracker.finish({"objective": {"name": "eval.after.pass_at_1", "value": 0.5}, "train": {"steps": 2}}, 0)
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert set(events.Tags()["scalars"]) == {*METRICS, "objective"}
    assert [e.step for e in events.Scalars("kl")] == [1, 2]


def test_tensorboard_event_files_go_to_a_remote_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gs:// run dir (here fsspec's memory://) receives the event files, not a pod-local folder."""
    import fsspec
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlexp.tracking import tensorboard_tracker

    monkeypatch.setattr(tensorboard_tracker, "REMOTE_FLUSH_S", 0.5)  # the writer's flush period, 5 s in runs

    run_dir = "memory://bucket/runs/tb-remote"
    fs = fsspec.filesystem("memory")
    tracker = make_tracker(compose_conf(["logger=tensorboard"]), run_dir, {})
    tracker.log(1, METRICS)
    (event,) = fs.glob("/bucket/runs/tb-remote/tensorboard/events.out.tfevents.*")
    deadline = time.time() + 30  # the writer thread uploads within REMOTE_FLUSH_S of new data
    while b"rewards/sum" not in fs.cat(event) and time.time() < deadline:
        time.sleep(0.2)
    assert b"rewards/sum" in fs.cat(event)  # written out during the run, not only at its end (preemption)
    tracker.log(2, METRICS)
    tracker.finish({"objective": {"name": "eval.after.pass_at_1", "value": 0.5}, "train": {"steps": 2}}, 0)
    local = tmp_path / "copy"
    local.mkdir()
    (local / event.rsplit("/", 1)[1]).write_bytes(fs.cat(event))
    events = EventAccumulator(str(local), size_guidance={"scalars": 0})
    events.Reload()
    assert set(events.Tags()["scalars"]) == {*METRICS, "objective"}
    assert [e.step for e in events.Scalars("kl")] == [1, 2]
    assert not list(Path.cwd().glob("**/tensorboard/events.out.tfevents.*"))  # nothing local
    fs.rm("/bucket", recursive=True)
