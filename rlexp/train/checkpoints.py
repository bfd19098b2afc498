"""Resume from the newest checkpoint that can be restored: damaged ones are set aside, never deleted.

Tunix restores the newest `checkpoints/actor/<step>` and fails deep inside orbax when its files are
damaged (a truncated copy, a file overwritten). Before JAX is imported (the run's plan, rlexp.train.plan), every file of the newest
steps is checked without decoding any array: JSON metadata parses, and OCDBT files (b-tree nodes and zstd
data frames) are exactly as long as their headers say. A damaged step is
moved to `checkpoints.unrestorable/actor/<step>` (one warning line) and the run resumes from the newest
whole one; when none is whole, or the run has several processes, it stops with one line instead.
Local run dirs only: a gs:// run dir is left to Tunix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from rlexp import storage
from rlexp.compat.orbax import drop_failed_read_leftovers
from rlexp.errors import RunError

log = logging.getLogger(__name__)

_OCDBT_MAGIC = (bytes.fromhex("0cdb3a2a"), bytes.fromhex("0cdb20de"))  # manifest, b-tree node / data
_ZSTD_MAGIC = bytes.fromhex("28b52ffd")
_ITEMS = ("model_params",)  # optimizer_state is absent from LoRA-only and export-only checkpoints


def _read(f: BinaryIO, at: int, n: int) -> bytes:
    f.seek(at)
    data = f.read(n)
    if len(data) < n:
        raise ValueError("cut short")
    return data


def _zstd_end(f: BinaryIO, at: int, size: int) -> int:
    """Offset just past the zstd frame starting at `at`, read block header by block header (no decoding);
    ValueError when the frame runs past the end of the file."""
    fhd = _read(f, at + 4, 1)[0]
    single, checksum, dict_flag, fcs_flag = fhd >> 5 & 1, fhd >> 2 & 1, fhd & 3, fhd >> 6
    pos = at + 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag] + (1 if single else 0, 2, 4, 8)[fcs_flag]
    while True:
        header = int.from_bytes(_read(f, pos, 3), "little")
        kind, length = header >> 1 & 3, header >> 3
        pos += 3 + (1 if kind == 1 else length)
        if kind == 3 or pos > size:
            raise ValueError("cut short")
        if header & 1:
            return pos + (4 if checksum else 0)


def _file_damage(path: Path) -> str | None:
    """Why one checkpoint file is damaged, or None; reads headers only, except for JSON metadata."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(12)
        if path.name.startswith("_") or path.parent.name == "array_metadatas" or head[:1] in (b"{", b"["):
            try:
                json.loads(head + f.read())
            except ValueError:
                return "not JSON"
            return None
        if path.parent.name != "d" and not path.name.endswith(".ocdbt"):
            return None  # commit_success.txt and formats this check does not know: a false alarm costs a good step
        if head[:4] not in (*_OCDBT_MAGIC, _ZSTD_MAGIC):
            return "empty" if not head else "neither OCDBT nor zstd data"
        # an OCDBT file: zstd frames and blocks whose header states their length, ending at the end of the file
        pos = 0
        try:
            while pos < size:
                magic = _read(f, pos, 4)
                if magic in _OCDBT_MAGIC:
                    pos += int.from_bytes(_read(f, pos + 4, 8), "little")
                elif magic == _ZSTD_MAGIC:
                    pos = _zstd_end(f, pos, size)
                else:
                    return f"unreadable bytes at offset {pos}"
        except ValueError:
            return f"cut short ({size} bytes)"
    return None if pos == size else f"cut short ({size} of {pos} bytes)"


FILES = "rlexp_files.json"  # in a step dir: its OCDBT files and their sizes, recorded once orbax committed it


def _immutable(path: Path) -> bool:
    """OCDBT data files and manifests, never rewritten once their step is committed."""
    return path.parent.name == "d" or path.name.endswith(".ocdbt")


def record_files(run_dir: str) -> None:
    """For each committed step of `run_dir` without a record yet, record its OCDBT files and sizes (FILES), so a
    later resume can tell a step that lost a file (which no header check sees) from a whole one. Local run dirs."""
    root = Path(run_dir) / "checkpoints" / "actor"
    if storage.is_url(run_dir) or not root.is_dir():
        return
    for step_dir in root.iterdir():
        if not step_dir.name.isdigit() or (step_dir / FILES).exists():
            continue
        if not (step_dir / "commit_success.txt").exists():  # orbax is still writing it
            continue
        files = {str(f.relative_to(step_dir)): f.stat().st_size for f in sorted(step_dir.rglob("*")) if _immutable(f)}
        tmp = step_dir / f".{FILES}.tmp"
        try:
            tmp.write_text(json.dumps(files, indent=0))
            tmp.replace(step_dir / FILES)
        except OSError:  # a full disk: the record is a check for later, never a reason to fail the run
            tmp.unlink(missing_ok=True)


def _missing(step_dir: Path) -> str | None:
    """A file the step's record lists that is gone or has another size, or None (also without a record)."""
    try:
        files = json.loads((step_dir / FILES).read_text())
    except (OSError, ValueError):
        return None
    for rel, size in files.items():
        path = step_dir / rel
        if not path.is_file():
            return f"{rel} missing"
        if path.stat().st_size != size:
            return f"{rel} is {path.stat().st_size} bytes, {size} when saved"
    return None


def damage(step_dir: Path) -> str | None:
    """Why a checkpoint step cannot be restored, or None when all its files are whole."""
    for item in _ITEMS:
        if not (step_dir / item).is_dir():
            return f"no {item}/"
    if (gone := _missing(step_dir)) is not None:
        return gone
    for path in sorted(p for p in step_dir.rglob("*") if p.is_file()):
        reason = _file_damage(path)
        if reason is not None:
            return f"{path.relative_to(step_dir)} {reason}"
    return None


def check_restorable(root: Path, step: int, other_step: str) -> None:
    """A checkpoint step that lost a file or holds a cut one, named in one RunError line before any weights load
    (orbax's own error, later, says less); `other_step`: the command's fix when other steps were saved (`{steps}`
    lists them: `rlexp eval` and `rlexp export` each name their own)."""
    from rlexp.models.export import saved_steps

    why = damage(root / str(step))
    if why is not None:
        others = ", ".join(str(s) for s in saved_steps(root) if s != step)
        fix = other_step.format(steps=others) if others else "retrain, or restore the checkpoint from a copy"
        raise RunError(f"checkpoint={root / str(step)}: cannot be restored ({why}); {fix}")


def newest_step(run_dir: str) -> int:
    """The step of the newest checkpoint in `run_dir` (local or gs://), 0 when there is none."""
    names = (d.rstrip("/").rsplit("/", 1)[-1] for d in storage.list_dirs(storage.join(run_dir, "checkpoints/actor")))
    return max((int(n) for n in names if n.isdigit()), default=0)


def check_optimizer_layout(run_dir: str, step: int) -> None:
    """Refuse, before JAX is imported, a checkpoint `step` (the one the run resumes from) whose optimizer state has
    optax.adamw's own layout (no `schedule` entries), as every checkpoint written before rlexp.train.optimizer has:
    orbax would refuse it after the models loaded, as a tree that does not match."""
    if not step:
        return
    step_dir = storage.join(run_dir, "checkpoints", "actor", str(step))
    text = storage.read_text(storage.join(step_dir, "optimizer_state", "_METADATA"))  # absent: LoRA-only steps
    try:
        tree = json.loads(text or "").get("tree_metadata", {})
    except (ValueError, AttributeError):  # unreadable: the restore's own error names it
        return
    if tree and not any("'schedule'" in key for key in tree):
        raise RunError(
            f"{step_dir}: its optimizer state was written before rlexp kept the learning-rate schedule in it "
            "(rlexp.train.optimizer), so this rlexp cannot resume it; resume with the rlexp that wrote it or "
            "choose another hydra.run.dir (`rlexp eval` and `rlexp export` still read its weights)"
        )


def fall_back_to_restorable(run_dir: str, *, can_move: bool) -> dict[int, str]:
    """Make the newest checkpoint of `run_dir` a restorable one, or raise RunError in one line; returns the
    damaged steps it set aside, and why.

    `can_move`: this process may set damaged steps aside (a single-process run); otherwise a damaged
    newest step stops the run, since other processes would restore from it meanwhile.
    """
    if storage.is_url(run_dir):
        return {}
    root = Path(run_dir) / "checkpoints" / "actor"
    if not root.is_dir():
        return {}
    steps = sorted((int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
    bad: dict[int, str] = {}
    for step in steps:
        reason = damage(root / str(step))
        if reason is None:
            break
        bad[step] = reason
    if not bad:
        return {}
    newest, why = next(iter(bad.items()))
    good = next((s for s in steps if s not in bad), None)
    if good is None or not can_move:
        fix = "restore the checkpoints from a copy, or start over in another hydra.run.dir"
        if good is not None:
            fix = f"move {root / str(newest)} aside to resume from step {good} (a run of one process does this itself)"
        raise RunError(f"{root / str(newest)}: cannot be restored ({why}); {fix}")
    aside = Path(run_dir) / "checkpoints.unrestorable" / "actor"
    aside.mkdir(parents=True, exist_ok=True)
    for step in bad:
        target = aside / str(step)
        n = 1
        while target.exists():  # an earlier fall-back set the same step aside
            target, n = aside / f"{step}.{n}", n + 1
        shutil.move(str(root / str(step)), str(target))
    steps_text = ", ".join(map(str, bad))
    log.warning(
        "checkpoint %s cannot be restored (%s); moved to %s, resuming from step %s", steps_text, why, aside, good
    )
    return bad


def _from_orbax(err: BaseException) -> bool:
    """Whether an exception came out of orbax or TensorStore (a restore), judged by its traceback."""
    seen: BaseException | None = err
    while seen is not None:
        tb = seen.__traceback__
        while tb is not None:
            if any(lib in tb.tb_frame.f_code.co_filename for lib in ("/orbax/", "/tensorstore/")):
                return True
            tb = tb.tb_next
        seen = seen.__cause__ or seen.__context__
    return False


@contextlib.contextmanager
def restorable(run_dir: str) -> Iterator[None]:
    """Around building the Tunix cluster (which restores the newest checkpoint; the run's plan set damaged
    steps aside already, rlexp.train.plan): turn a restore that still fails into one line naming the checkpoint."""
    drop_failed_read_leftovers()  # a damaged file's read leftovers would bury the one-line error
    try:
        yield
    except Exception as err:
        root = storage.join(run_dir, "checkpoints", "actor")
        if not _from_orbax(err) or not storage.list_dirs(root):
            raise
        newest = max(storage.list_dirs(root), key=lambda d: int(d.rsplit("/", 1)[-1]) if d[-1].isdigit() else -1)
        reason = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        raise RunError(
            f"{newest}: cannot be restored ({reason}); move it aside to resume from an earlier checkpoint, "
            "or choose another hydra.run.dir"
        ) from err
