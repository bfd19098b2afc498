"""Small-file IO for run and sweep dirs that may be local paths or fsspec URLs (gs://, memory://).

Local writes go through a temporary file and a rename so a reader never sees half a manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import fsspec

from rlexp.redact import scrub


def is_url(path: str) -> bool:
    return "://" in str(path)


def join(base: str, *parts: str) -> str:
    """Join path parts with '/', keeping a URL's scheme intact."""
    out = str(base).rstrip("/")
    for part in parts:
        out = f"{out}/{str(part).strip('/')}"
    return out


def filesystem(path: str, key: str | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """fsspec's filesystem and path inside it for a local path or URL. gs:// without gcsfs, or a protocol fsspec does
    not know, is one line naming `key` (the config key or argument that gave the path) and what to install."""
    try:
        return fsspec.core.url_to_fs(str(path))
    except (ImportError, ValueError) as err:  # no traceback: the user fixes it with a pip install or another URL
        from rlexp.errors import RlexpError

        protocol = str(path).split("://", 1)[0] if "://" in str(path) else ""
        fix = "pip install gcsfs" if protocol in ("gs", "gcs") else f"install fsspec's backend for {protocol}://"
        raise RlexpError(f"{f'{key}={path}' if key else path}: {str(err).splitlines()[0]}; {fix}") from None


_fs = filesystem


def exists(path: str) -> bool:
    fs, p = _fs(path)
    return fs.exists(p)


def read_bytes(path: str) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    fs, p = _fs(path)
    try:
        with fs.open(p, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        from rlexp.errors import RunError

        raise RunError(f"{path}: a folder where a file belongs; move it aside") from None


def read_text(path: str) -> str | None:
    """The file's text, or None when it does not exist; a file that is not UTF-8 is a one-line error."""
    data = read_bytes(path)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        from rlexp.errors import RunError

        raise RunError(
            f"{path}: not UTF-8 text (byte {err.start} is {data[err.start : err.start + 1]!r}); "
            "restore the file from a copy, or move it aside"
        ) from None


def read_json(path: str) -> Any:
    """Parsed JSON, or None when the file is missing or not (yet) valid JSON."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a truncated last line (a run killed mid-write) is skipped."""
    text = read_text(path)
    rows = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def write_text(path: str, text: str) -> None:
    """Write `text` whole (a temporary file renamed over `path`), its secrets scrubbed (rlexp.redact)."""
    write_bytes(path, scrub(text).encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
    """Write `data` whole: locally a temporary file renamed over `path`, so a reader never sees part of it."""
    if not is_url(path):
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
            os.replace(tmp, path)
        except OSError as err:  # a full or read-only disk: no temp file left behind, the error names the file
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise OSError(err.errno, err.strerror, path) from err
        return
    fs, p = _fs(path)
    parent = p.rsplit("/", 1)[0]
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(p, "wb") as f:
        f.write(data)


def write_json(path: str, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def list_names(path: str) -> set[str] | None:
    """Names of the entries directly under `path`, or None when it cannot be listed (missing, not a dir).

    One listing instead of a probe per file that may be missing: a sweep's end reads a few files of every job."""
    if not is_url(path):
        try:
            return set(os.listdir(path))
        except OSError:
            return None
    fs, p = _fs(path)
    try:
        return {str(name).rstrip("/").rsplit("/", 1)[-1] for name in fs.ls(p, detail=False)}
    except (OSError, ValueError):
        return None


def list_dirs(path: str) -> list[str]:
    """Immediate subdirectories of `path` as full paths/URLs (empty when `path` is missing)."""
    fs, p = _fs(path)
    if not fs.exists(p):
        return []
    out = []
    for info in fs.ls(p, detail=True):
        if info.get("type") == "directory":
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            out.append(join(path, name))
    return sorted(out)


def is_remote_source(source: str | None) -> bool:
    """A hub id or a remote URL (gs://, ...), as opposed to a file on this machine: data the launching
    machine may not hold, which only the job itself downloads."""
    if not source or str(source).startswith(("memory://", "file://")):
        return False
    return not Path(str(source)).expanduser().exists()


# The file that marks a folder as rlexp's own output (claim_output_dir): rlexp writes into no other non-empty folder.
OUTPUT_MARKER = ".rlexp-output"


def check_output_dir(path: str | Path, key: str = "--out", marker: str = OUTPUT_MARKER) -> Path:
    """The local folder `path` if rlexp may write into it: absent, empty, or carrying `marker` (an earlier rlexp
    output); else a one-line RlexpError naming `key`, the folder and the fix. Writes nothing (see claim_output_dir)."""
    from rlexp.errors import RlexpError

    dest = Path(path).expanduser()
    if dest.exists() and not dest.is_dir():
        raise RlexpError(f"{key}={path}: a file is there; give a folder (new, or one rlexp wrote before)")
    if dest.is_dir() and not (dest / marker).is_file():
        try:
            others = next(iter(os.scandir(dest)), None) is not None
        except OSError as err:
            raise RlexpError(f"{key}={path}: cannot list the folder ({err.strerror}); give another {key}") from None
        if others:
            raise RlexpError(
                f"{key}={path}: a folder holding other files that rlexp did not write (no {marker}); "
                f"give another {key}, or delete the folder"
            )
    return dest


def claim_output_dir(path: str | Path, key: str = "--out", marker: str = OUTPUT_MARKER, note: str = "rlexp\n") -> Path:
    """`check_output_dir`, then the folder created and `marker` written into it (its text: `note`), so that rlexp
    may write into it again later and into nothing it did not make. Call it right before the first write: a command
    refused earlier leaves no folder behind."""
    dest = check_output_dir(path, key, marker)
    dest.mkdir(parents=True, exist_ok=True)
    write_text(str(dest / marker), note)
    return dest
