"""The run directory: atomic small files through fsspec (local or gs://), versions, resume state."""

from __future__ import annotations

import json
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import fsspec

PACKAGES = ("rlexp", "google-tunix", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "hydra-core")


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def exists(path: str) -> bool:
    fs, p = fsspec.core.url_to_fs(path)
    return fs.exists(p)


def write_json_atomic(path: str, obj: Any) -> None:
    """Write JSON so a reader never sees half a file (tmp + rename on local disks)."""
    text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=True) + "\n"
    fs, p = fsspec.core.url_to_fs(path)
    if fs.protocol in ("file", ("file", "local")) or "file" in fs.protocol:
        tmp = Path(p).with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(p)
    else:  # object stores replace whole objects on write
        with fs.open(p, "w") as f:
            f.write(text)


def read_json(path: str) -> Any:
    with fsspec.open(path, "r") as f:
        return json.load(f)


def read_jsonl(path: str) -> list[dict[str, Any]]:
    if not exists(path):
        return []
    with fsspec.open(path, "r") as f:
        return [json.loads(line) for line in f if line.strip()]


def truncate_jsonl(path: str, max_step: int) -> None:
    """Drop records after `max_step` (steps that a resumed run will redo)."""
    records = [r for r in read_jsonl(path) if r.get("step", 0) <= max_step]
    with fsspec.open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def versions() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    try:
        repo = Path(__file__).resolve().parents[2]
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
        out["git_commit"] = (commit + ("-dirty" if dirty else "")) or "unknown"
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
