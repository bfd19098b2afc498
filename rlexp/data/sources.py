"""Reading raw records from a dataset source: a local path, a remote path (gs://) or a hub dataset.

Local and remote paths go through fsspec, so `gs://bucket/data/train.jsonl` and
`/data/train.jsonl` are read by the same code (gs:// needs `gcsfs`). A folder holds one or
more files per split, named `<split>.jsonl` or sharded as `<split>-00000-of-00004.parquet`
(the layout of hub dataset repositories). Anything else that looks like `owner/name` is a
hub dataset, loaded with `datasets` (cached under HF_HOME); offline, that fails with a
one-line error saying how to fix it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from rlexp import log_setup
from rlexp.errors import ConfigError, RlexpError, RunError

FORMATS = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
Record = dict[str, Any]


def _fs(path: str, key: str | None = None) -> tuple[Any, str]:
    from rlexp.storage import filesystem

    return filesystem(path, key)


def is_path(source: str) -> bool:
    """True for something fsspec reads (a URL or an existing local path), False for a hub id."""
    if "://" in source or os.path.exists(source) or source.endswith(tuple(FORMATS)):
        return True
    return not _HUB_ID.match(source)


def _format_of(path: str, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    for suffix, name in FORMATS.items():
        if path.endswith(suffix):
            return name
    raise ConfigError("dataset.format", fmt, f"cannot tell the format of {path}; set jsonl, json or parquet")


def split_files(source: str, split: str | None, key: str = "dataset.source") -> list[str]:
    """The data files of one split: the source itself if it is a file, else `<split>*` files in the folder."""
    fs, root = _fs(source, key)
    if not fs.exists(root):
        raise ConfigError(key, source, "no such file or folder")
    if not fs.isdir(root):
        return [source]
    if split is None:
        raise ConfigError(key, source, "is a folder: set dataset.split to the file-name prefix of the split")
    found = []
    for path in sorted(fs.find(root)):
        name = path.rsplit("/", 1)[-1]
        stem = name.split(".", 1)[0]
        if any(name.endswith(s) for s in FORMATS) and (stem == split or stem.startswith(f"{split}-")):
            found.append(path if "://" not in source else fs.unstrip_protocol(path))
    if not found:
        raise ConfigError(key, source, f"holds no {split}.jsonl/.json/.parquet or {split}-*.parquet files")
    return found


MAX_ROW_BYTES = 1 << 20  # a longer jsonl line is skipped unread (no prompt that long fits a model's context)
_PARQUET_MAGIC = b"PAR1"


def _not_format(path: str, fmt: str, head: bytes) -> RlexpError:
    looks = "JSON lines" if head.lstrip()[:1] in (b"{", b"[") else "text (CSV?)" if head.isascii() else "binary"
    fix = "use dataset=jsonl" if looks == "JSON lines" else "convert it to jsonl or parquet"
    return RunError(f"{path}: not a {fmt} file (it looks like {looks}); {fix}, or set dataset.format to its format")


def _read_parquet(path: str, columns: list[str] | None) -> Iterator[tuple[str, Record]]:
    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    with fsspec.open(path, "rb") as f:
        head = f.read(4)
        if head != _PARQUET_MAGIC:
            raise _not_format(path, "parquet", head + f.read(60))
        f.seek(0)
        try:
            pf = pq.ParquetFile(f)
            present = set(pf.schema_arrow.names)
            cols = [c for c in columns if c in present] if columns else None
            index = 0
            for batch in pf.iter_batches(columns=cols, batch_size=8192):
                for record in batch.to_pylist():
                    index += 1
                    yield f"{path} row {index}", record
        except (pa.ArrowException, OSError) as err:
            raise RunError(f"{path}: not a readable parquet file ({str(err).splitlines()[0]}); rewrite it") from None


def _lines(f: Any, path: str) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of a binary file, read with a size limit: a line over MAX_ROW_BYTES gives None and is
    skipped without being held in memory whole."""
    line_no = 0
    while True:
        raw = f.readline(MAX_ROW_BYTES + 1)
        if not raw:
            return
        line_no += 1
        if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # the rest of the long line, a chunk at a time
                raw = f.readline(MAX_ROW_BYTES)
            yield line_no, None
            continue
        try:
            yield line_no, raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise RunError(
                f"{path}:{line_no}: not UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
                "convert the file to UTF-8 (iconv -t utf-8)"
            ) from None


def _read_file(path: str, fmt: str, columns: list[str] | None) -> Iterator[tuple[str, Record]]:
    """(where, record) of one data file; `where` is `path:line` (jsonl) or `path row N` (parquet, json)."""
    import fsspec

    fmt = _format_of(path, fmt)
    if fmt == "parquet":
        yield from _read_parquet(path, columns)
        return
    with fsspec.open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        if head == _PARQUET_MAGIC:
            raise RunError(f"{path}: a parquet file read as {fmt}; use dataset=parquet or dataset.format=parquet")
        if fmt == "json":
            try:
                data = json.loads(f.read().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise RunError(f"{path}: not a JSON document ({err}); fix it, or use dataset.format=jsonl") from None
            for index, record in enumerate(data if isinstance(data, list) else [data], 1):
                yield f"{path} item {index}", record
            return
        for line_no, line in _lines(f, path):
            where = f"{path}:{line_no}"
            if line is None:
                yield where, {"__oversized__": where}
            elif line.strip():
                try:
                    yield where, json.loads(line)
                except json.JSONDecodeError:
                    # Counted as unparseable by the caller (the marker), never trained on.
                    yield where, {"__unparseable__": where}


@contextlib.contextmanager
def _hub_offline(offline: bool) -> Iterator[None]:
    """Make `datasets` use only its cache while the block runs (no network when downloads are not allowed)."""
    if not offline:
        yield
        return
    import datasets.config
    import huggingface_hub.constants as hub_constants

    saved = (datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved


def _read_hub(source: str, subset: str | None, split: str, allow_downloads: bool) -> Iterator[tuple[str, Record]]:
    try:
        import datasets
    except ImportError as err:
        raise RlexpError(f"dataset.source={source!r} is a hub dataset: install `datasets`") from err
    try:
        with _hub_offline(not allow_downloads), log_setup.quiet_libraries("datasets", "huggingface_hub", "fsspec"):
            ds = datasets.load_dataset(source, name=subset, split=split)
    except Exception as err:  # noqa: BLE001 - datasets raises many types for "not reachable / not cached"
        why = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise RlexpError(
            f"dataset.source={source!r} (split {split!r}) could not be loaded from the hub or its cache ({why}); "
            "run once with network access to cache it, or point dataset.source to a local or gs:// copy"
        ) from err
    for index, record in enumerate(ds, 1):
        yield f"{source} ({split}) row {index}", record


def read_records(
    source: str,
    split: str | None,
    *,
    fmt: str = "auto",
    subset: str | None = None,
    columns: list[str] | None = None,
    allow_downloads: bool = True,
    key: str = "dataset.source",
) -> Iterator[tuple[str, Record]]:
    """(where, record) of one split, in file order: `where` names the file and line (or row) for errors.
    Unparseable JSON lines arrive as {"__unparseable__": where}, lines over MAX_ROW_BYTES as {"__oversized__": where}."""
    if is_path(source):
        for path in split_files(source, split, key):
            yield from _read_file(path, fmt, columns)
    else:
        yield from _read_hub(source, subset, split or "train", allow_downloads)
