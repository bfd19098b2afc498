"""Run-directory helpers of the trainer: package versions, dotted summary keys, resumable metrics.

Small-file IO (local paths or gs:// through fsspec, atomic local writes) is rlexp.storage.
"""

from __future__ import annotations

import json
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from rlexp import storage

PACKAGES = ("rlexp", "google-tunix", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "hydra-core")


def truncate_jsonl(path: str, max_step: int) -> None:
    """Drop records after `max_step` (steps that a resumed run will redo)."""
    records = [r for r in storage.read_jsonl(path) if r.get("step", 0) <= max_step]
    storage.write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def versions() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    try:
        repo = Path(__file__).resolve().parents[2]
        git = ["git", "-C", str(repo)]
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False)
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        head = commit.stdout.strip()
        out["git_commit"] = (head + ("-dirty" if dirty.stdout.strip() else "")) if head else "unknown"
    except (OSError, subprocess.SubprocessError):
        out["git_commit"] = "unknown"
    return out


def dotted_get(obj: dict[str, Any], dotted: str) -> Any:
    """summary["eval"]["after"]["pass_at_1"] for "eval.after.pass_at_1"; None when absent."""
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


class JsonlSink:
    """An append-only JSONL file of the run dir (metrics, samples), local or on an object store.

    Local files are appended to. Object stores cannot append, so there the whole file is
    rewritten — at most every `min_interval_s`, and always on `close()`.
    """

    def __init__(self, path: str, min_interval_s: float = 30.0) -> None:
        self.path, self.remote, self.min_interval_s = path, storage.is_url(path), min_interval_s
        self._lines: list[str] = (storage.read_text(path) or "").splitlines(keepends=True) if self.remote else []
        self._written = time.monotonic()

    def write(self, lines: list[str]) -> None:
        if not lines:
            return
        if not self.remote:
            with open(self.path, "a", encoding="utf-8") as f:
                f.writelines(lines)
            return
        self._lines += lines
        if time.monotonic() - self._written >= self.min_interval_s:
            self.close()

    def close(self) -> None:
        if self.remote:
            storage.write_text(self.path, "".join(self._lines))
            self._written = time.monotonic()


class NullSink:
    """A JsonlSink that writes nothing: the run files of processes other than process 0."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, lines: list[str]) -> None:
        pass

    def close(self) -> None:
        pass
