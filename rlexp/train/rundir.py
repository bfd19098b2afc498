"""Run-directory helpers of the trainer: the checks before a run takes a dir, package versions, dotted summary
keys, resumable metrics.

Small-file IO (local paths or gs:// through fsspec, atomic local writes) is rlexp.storage.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from rlexp import storage
from rlexp.config.load import flatten
from rlexp.errors import ConfigError, RunError
from rlexp.redact import scrub

PACKAGES = ("rlexp", "google-tunix", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "hydra-core")


# Keys a resumed run may change: they do not alter what is trained.
RESUMABLE_CHANGES = ("trainer.resume", "logger.", "compile_cache.", "output_dir", "sweep.", "validate.", "cost.")


def check_run_dir(conf: Any, cfg: Any, run_dir: str) -> None:
    """Refuse a run dir this run must not touch, before JAX is imported and before anything is written there:
    `trainer.resume=never` with checkpoints in it, or a resume (checkpoints, or a finished summary.json)
    with another config than the one recorded in its config.yaml."""
    from omegaconf import OmegaConf

    check_profile_dir(conf)  # before the run dir is made: a refused run leaves nothing behind
    if not storage.is_url(run_dir):
        try:
            Path(run_dir).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise RunError(
                f"output_dir={run_dir}: cannot create the run dir ({err.strerror}); choose a writable folder"
            ) from None
    has_ckpt = bool(storage.list_dirs(storage.join(run_dir, "checkpoints/actor")))
    if has_ckpt and conf.trainer.resume == "never":
        raise ConfigError(
            "trainer.resume",
            "never",
            f"{run_dir} already holds checkpoints; choose another hydra.run.dir or use trainer.resume=auto",
        )
    previous = storage.read_text(storage.join(run_dir, "config.yaml"))
    if not previous or not (has_ckpt or storage.exists(storage.join(run_dir, "summary.json"))):
        return
    try:
        before = flatten(OmegaConf.to_container(OmegaConf.create(previous), resolve=True))
    except Exception as err:  # noqa: BLE001 - YAML or OmegaConf: the recorded config is unreadable
        raise RunError(
            f"{storage.join(run_dir, 'config.yaml')}: not a readable config ({str(err).splitlines()[0]}); "
            "choose another hydra.run.dir (the run there cannot be resumed safely)"
        ) from None
    now = flatten(OmegaConf.to_container(cfg, resolve=True))
    for key in sorted(set(before) | set(now)):
        if key.startswith(RESUMABLE_CHANGES) or before.get(key) == now.get(key):
            continue
        raise ConfigError(
            key,
            now.get(key),
            f"{run_dir} was trained with {key}={before.get(key)!r}; resume with the same config "
            "or choose another hydra.run.dir",
        )


def check_profile_dir(conf: Any) -> None:
    """`profile.dir` on this machine must be a folder the trace can be written into, checked before the run (JAX's
    profiler fails only at the traced step, with a traceback). Nothing is created here."""
    where = conf.profile.dir
    if not conf.profile.steps or not where or storage.is_url(where):
        return
    path = Path(where).expanduser().absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise RunError(f"profile.dir={where}: {existing} is a file, not a folder; choose a folder for the trace")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunError(f"profile.dir={where}: {existing} is not writable; choose a folder you can write")


def truncate_jsonl(path: str, max_step: int) -> set[int]:
    """Drop records after `max_step` (steps that a resumed run will redo); the steps of the records kept."""
    records = [r for r in storage.read_jsonl(path) if r.get("step", 0) <= max_step]
    storage.write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    return {r.get("step", 0) for r in records}


def pop_row(path: str, step: int) -> dict[str, Any]:
    """Remove `step`'s records from a JSONL file; their fields (less `step`) as one row."""
    records = storage.read_jsonl(path)
    storage.write_text(path, "".join(json.dumps(r) + "\n" for r in records if r.get("step", 0) != step))
    row: dict[str, Any] = {}
    for r in records:
        if r.get("step", 0) == step:
            row.update({k: v for k, v in r.items() if k != "step"})
    return row


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
        lines = [scrub(line) for line in lines]  # a sample or an error that echoes a key (rlexp.redact)
        if not self.remote:
            try:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.writelines(lines)
            except OSError as err:  # name the file: a full disk's errno alone says nothing of where
                raise OSError(err.errno, err.strerror, self.path) from err
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
