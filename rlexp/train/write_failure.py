"""A write of a run that fails (a full disk, a read-only or forbidden one) is one clear stop that keeps what
was saved: one line naming the path and the errno, exit 1, the unfinished checkpoint's temp folder and
temp files removed, `summary.json` saying `failed` when it can still be written. Older checkpoints are never
deleted before a newer one is whole (orbax commits a step by renaming its temp folder), so the newest whole
checkpoint stays restorable and a rerun resumes from it once space is freed.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from rlexp import storage
from rlexp.errors import RunError

log = logging.getLogger("rlexp.train")
WRITE_ERRNOS = {errno.ENOSPC: "ENOSPC", errno.EROFS: "EROFS", errno.EACCES: "EACCES", errno.EDQUOT: "EDQUOT"}
# TensorStore (orbax) reports a failed write in its message: `Failed writing: "<path>": ... [os_error_code='28']`
_TENSORSTORE = re.compile(r'(?:Failed writing|Error writing local file): "([^"]+)".*?os_error_code=.(\d+)', re.S)
TEMP_DIR = ".orbax-checkpoint-tmp"


def failed_write(err: BaseException) -> tuple[str, int] | None:
    """(path, errno) of the failed write somewhere in `err`'s chain, or None when it is no such failure."""
    seen: BaseException | None = err
    found: tuple[str, int] | None = None
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in WRITE_ERRNOS:
            found = (str(seen.filename) if seen.filename else (found or ("?", 0))[0], seen.errno)
            if seen.filename:
                return found
        m = _TENSORSTORE.search(str(seen))
        if m and int(m.group(2)) in WRITE_ERRNOS:
            return m.group(1), int(m.group(2))
        seen = seen.__cause__ or seen.__context__
    return found


def _clean_once(root: Path) -> int:
    found = [*root.glob(f"checkpoints/*/*{TEMP_DIR}*"), *root.glob(".tmp-*")]
    for tmp in found:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    return len(found)


def clean_temp(run_dir: str, settle_s: float = 5.0) -> None:
    """Remove the unfinished checkpoint folders and the temp files of atomic writes. orbax's writer threads may
    still be failing when the error reaches us and create folders again: clean until nothing came back for a
    second (at most `settle_s`), and once more when the process exits."""
    root = Path(run_dir)
    quiet_since, end = time.monotonic(), time.monotonic() + settle_s
    while time.monotonic() < end and time.monotonic() - quiet_since < 1.0:
        if _clean_once(root):
            quiet_since = time.monotonic()
        time.sleep(0.1)
    atexit.register(_clean_once, root)


def newest_whole_step(run_dir: str) -> int | None:
    from rlexp.train.checkpoints import damage

    root = Path(run_dir) / "checkpoints" / "actor"
    steps = sorted((int(p.name) for p in root.glob("*") if p.is_dir() and p.name.isdigit()), reverse=True)
    return next((s for s in steps if damage(root / str(s)) is None), None)


def as_run_error(run_dir: str, err: BaseException) -> RunError | None:
    """The one-line RunError for a failed write (temp files cleaned, summary.json marked failed), or None."""
    found = failed_write(err)
    if found is None or storage.is_url(run_dir):
        return None
    path, code = found
    path = run_dir if path == "?" else path  # a write inside a library that named no file: at least the dir
    clean_temp(run_dir)
    step = newest_whole_step(run_dir)
    resume = f"rerun to resume from step {step}" if step is not None else "rerun to start again (no whole checkpoint)"
    message = (
        f"{path}: {os.strerror(code)} ({WRITE_ERRNOS[code]}); the run stopped: free space or fix the permissions "
        f"there (or choose another hydra.run.dir), then {resume}"
    )
    summary = storage.read_json(storage.join(run_dir, "summary.json"))
    summary = summary if isinstance(summary, dict) else {}
    summary.update(status="failed", error=message)
    summary.setdefault("train", {})["steps"] = step or 0
    with contextlib.suppress(OSError):
        storage.write_json(storage.join(run_dir, "summary.json"), summary)
    return RunError(message)


def checkpoint_bytes(conf: Any) -> int:
    """A lower bound of one saved step: its stored parameters (the tiny default's step: 480 KiB on disk for 486 KiB
    of float32 parameters; orbax's zstd shrinks AdamW's moments), so a warning is never a false alarm."""
    from rlexp.estimates.model_terms import BYTES, lora_param_count, param_count

    m, t = conf.model, conf.trainer
    stored = lora_param_count(m, t.lora.rank) if t.lora.rank > 0 else param_count(m)  # LoRA: the adapters alone
    return stored * BYTES.get(m.param_dtype, 4)


def warn_if_low_space(conf: Any, run_dir: str) -> None:
    """The preflight's warning when the run dir's disk has less free space than the checkpoints it will hold:
    `trainer.keep_checkpoints` whole ones and the one being written."""
    if storage.is_url(run_dir) or conf.trainer.checkpoint_every <= 0:
        return
    need = checkpoint_bytes(conf) * (conf.trainer.keep_checkpoints + 1)
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return
    if free < need:
        log.warning(
            "%s: %.1f MiB free, the checkpoints need at least %.1f MiB (%d kept + 1 being written); free space or "
            "choose another hydra.run.dir, or a full disk stops the run at a checkpoint",
            run_dir,
            free / 2**20,
            need / 2**20,
            conf.trainer.keep_checkpoints,
        )
