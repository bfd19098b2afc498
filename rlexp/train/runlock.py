"""One run at a time in a run dir: `<run dir>/.rlexp.lock` names the owner's host and pid.

Two runs started into one `hydra.run.dir` interleaved their metrics rows and collided in the checkpointer. The
lock is taken with O_EXCL after the run dir's checks and before anything is written there; a second run is
refused in one line naming the owner. A lock whose owner is gone (same host, no such pid) is stale and taken
over. Pods and Slurm jobs skip it: their scheduler runs one job per dir, and a restarted pod has another host
name. A finished run's rerun changes nothing (`finished_run`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from rlexp import storage
from rlexp.errors import RunError

LOCK = ".rlexp.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _owner(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def take(run_dir: str) -> None:
    """Hold the run dir's lock until this process ends; a RunError naming the owner when a live run holds it."""
    if storage.is_url(run_dir):
        return  # object stores have no exclusive create: launched jobs there are the scheduler's to keep apart
    path = Path(run_dir) / LOCK
    me = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            owner = _owner(path)
            if owner is None or owner.get("pid") == me["pid"]:
                path.unlink(missing_ok=True)  # half-written by a run killed while taking it, or ours
                continue
            host, pid = owner.get("host"), int(owner.get("pid") or 0)
            if host == me["host"] and not _alive(pid):
                path.unlink(missing_ok=True)  # stale: its run ended without releasing it
                continue
            raise RunError(
                f"hydra.run.dir={run_dir}: another run (host {host}, pid {pid}, since {owner.get('started')}) is "
                f"training there; wait for it, or choose another hydra.run.dir (if it is gone, delete {path})"
            ) from None
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        atexit.register(release, run_dir)
        return
    raise RunError(f"hydra.run.dir={run_dir}: cannot take {path}; delete it if no run is training there")


def release(run_dir: str) -> None:
    """Drop the lock if this process holds it."""
    path = Path(run_dir) / LOCK
    owner = _owner(path)
    if owner is not None and owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
        with contextlib.suppress(OSError):
            path.unlink()


def finished_run(conf: Any, run_dir: str) -> dict[str, Any] | None:
    """The summary of a run that already completed every step of this config in `run_dir`, else None (the
    config was compared with the recorded one by `check_run_dir` already)."""
    summary = storage.read_json(storage.join(run_dir, "summary.json"))
    if not isinstance(summary, dict) or summary.get("status") != "completed":
        return None
    train = summary.get("train") if isinstance(summary.get("train"), dict) else {}
    steps = train.get("steps")
    if not isinstance(steps, int) or steps < conf.trainer.max_steps:
        return None
    if not storage.is_url(run_dir):  # a newer or damaged newest checkpoint: the ordinary resume decides
        from rlexp.train.checkpoints import damage

        root = Path(run_dir) / "checkpoints" / "actor"
        saved = sorted(int(p.name) for p in root.glob("*") if p.is_dir() and p.name.isdigit())
        if saved and (saved[-1] != steps or damage(root / str(saved[-1])) is not None):
            return None
    return summary
