"""The terminal sweep table printed while a multirun runs: one row per job, swept keys as columns."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from rlexp import log_setup
from rlexp.sweep.manifest import counts

log = logging.getLogger(__name__)

_MARK = {"pending": " ", "running": ">", "completed": "+", "failed": "!"}


def _value(overrides: list[str], key: str) -> str:
    for item in overrides:
        k, _, v = item.lstrip("+").partition("=")
        if k == key:
            return v
    return ""


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def render(manifest: dict, *, width: int = 120) -> str:
    """A plain-text table of the sweep's jobs with a done / running / failed header line."""
    c = counts(manifest)
    total = len(manifest["jobs"])
    head = (
        f"sweep {manifest['group']}: {c['completed']}/{total} done, {c['running']} running, "
        f"{c['failed']} failed, {c['pending']} pending"
    )
    keys = list(manifest.get("swept_keys") or [])
    # why a job failed (its one-line error, or its Slurm log's last error line), when any did
    errors = any(job["state"] == "failed" and job.get("error") for job in manifest["jobs"])
    cols = ["job", *keys, "state", manifest["objective"]["name"], "handle", *(["error"] if errors else [])]
    rows = []
    for job in manifest["jobs"]:
        handle = (job.get("launcher") or {}).get("handle")
        rows.append(
            [
                f"{_MARK.get(job['state'], '?')}{job['num']}",
                *[_value(job.get("overrides") or [], k) for k in keys],
                job["state"],
                _fmt(job.get("objective")),
                _fmt(handle),
                *([job.get("error") or "" if job["state"] == "failed" else ""] if errors else []),
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows, strict=False)]
    lines = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=False)).rstrip()]
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(line[:width] for line in lines)


def show(manifest: dict, stream: TextIO | None = None) -> None:
    """The table on stderr (or `stream`): a display, printed whole rather than logged line by line; -q hides it."""
    if stream is None and not log_setup.shows(log):
        return
    stream = stream or sys.stderr
    print("\n" + render(manifest, width=200) + "\n", file=stream, flush=True)
