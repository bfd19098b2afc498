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

from rlexp.errors import ConfigError, RlexpError

FORMATS = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
Record = dict[str, Any]


def _fs(path: str) -> tuple[Any, str]:
    import fsspec

    try:
        return fsspec.core.url_to_fs(path)
    except (ImportError, ValueError) as err:
        protocol = path.split("://", 1)[0]
        extra = "gcsfs" if protocol in ("gs", "gcs") else f"the fsspec backend for {protocol}://"
        raise RlexpError(f"cannot read {path}: {err}; install {extra}") from err


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
    fs, root = _fs(source)
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


def _read_file(path: str, fmt: str, columns: list[str] | None) -> Iterator[Record]:
    import fsspec

    fmt = _format_of(path, fmt)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with fsspec.open(path, "rb") as f:
            pf = pq.ParquetFile(f)
            present = set(pf.schema_arrow.names)
            cols = [c for c in columns if c in present] if columns else None
            for batch in pf.iter_batches(columns=cols, batch_size=8192):
                yield from batch.to_pylist()
        return
    with fsspec.open(path, "rt", encoding="utf-8") as f:
        if fmt == "json":
            data = json.load(f)
            yield from data if isinstance(data, list) else [data]
            return
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                # Counted as unparseable by the caller (the None marker), never trained on.
                yield {"__unparseable__": f"{path}:{line_no}"}


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


def _read_hub(source: str, subset: str | None, split: str, allow_downloads: bool) -> Iterator[Record]:
    try:
        import datasets
    except ImportError as err:
        raise RlexpError(f"dataset.source={source!r} is a hub dataset: install `datasets`") from err
    try:
        with _hub_offline(not allow_downloads):
            ds = datasets.load_dataset(source, name=subset, split=split)
    except Exception as err:  # noqa: BLE001 - datasets raises many types for "not reachable / not cached"
        why = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise RlexpError(
            f"dataset.source={source!r} (split {split!r}) could not be loaded from the hub or its cache ({why}); "
            "run once with network access to cache it, or point dataset.source to a local or gs:// copy"
        ) from err
    yield from ds


def read_records(
    source: str,
    split: str | None,
    *,
    fmt: str = "auto",
    subset: str | None = None,
    columns: list[str] | None = None,
    allow_downloads: bool = True,
    key: str = "dataset.source",
) -> Iterator[Record]:
    """Raw records of one split, in file order. Unparseable JSON lines arrive as {"__unparseable__": where}."""
    if is_path(source):
        for path in split_files(source, split, key):
            yield from _read_file(path, fmt, columns)
    else:
        yield from _read_hub(source, subset, split or "train", allow_downloads)
