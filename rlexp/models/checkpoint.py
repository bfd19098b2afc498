"""Checks on a Hugging Face checkpoint folder before its weights are read, and the Tunix loader call.

A folder must hold config.json and either one `model.safetensors` or the shards that
`model.safetensors.index.json` names; a missing shard, or a file whose header does not describe its
bytes (truncated, overwritten), is reported by name before any weight is read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlexp.errors import RlexpError, RunError
from rlexp.storage import filesystem

INDEX = "model.safetensors.index.json"


def _fs(path: str) -> tuple[Any, str]:
    fs, root = filesystem(path, "model.path")
    return fs, root.rstrip("/")


def safetensors_files(ckpt_dir: str) -> list[str]:
    """Paths of the folder's safetensors files; raises naming any shard the index lists but the folder lacks."""
    fs, root = _fs(ckpt_dir)
    if not fs.exists(root):
        raise RlexpError(f"checkpoint folder {ckpt_dir} does not exist; set model.path to a folder with safetensors")
    present = {p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)}
    if INDEX in present:
        try:
            with fs.open(f"{root}/{INDEX}", "r", encoding="utf-8") as f:
                weight_map = json.load(f).get("weight_map", {})
        except (ValueError, AttributeError):
            raise RunError(f"{root}/{INDEX}: not a readable index of shards; download the model again") from None
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if s not in present]
        if missing:
            raise RlexpError(
                f"{ckpt_dir}: missing safetensors shard(s) {', '.join(missing)} listed in {INDEX} "
                f"({len(shards) - len(missing)} of {len(shards)} present); download them again"
            )
        files = shards
    else:
        files = sorted(p for p in present if p.endswith(".safetensors"))
    if not files:
        raise RlexpError(f"{ckpt_dir}: no *.safetensors files; a checkpoint folder needs its weights in safetensors")
    for name in files:
        check_safetensors(fs, f"{root}/{name}")
    return [f"{root}/{s}" for s in files]


def check_safetensors(fs: Any, path: str) -> None:
    """Read a safetensors file's header (8 bytes of length, then JSON) and check that every tensor's bytes
    lie within the file: a truncated or corrupt file fails here in one line, before any weight is read
    (the library itself fails with MemoryError or a Rust panic)."""
    bad = f"{path}: not a complete safetensors file"
    fix = "download the model again"
    size = fs.size(path)
    with fs.open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise RunError(f"{bad} ({size} bytes); {fix}")
        n = int.from_bytes(head, "little")
        if n > min(size - 8, 100 * 2**20):
            raise RunError(f"{bad} (header of {n} bytes in a file of {size}); {fix}")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise RunError(f"{bad} (its header is not JSON); {fix}") from None
    if not isinstance(header, dict):
        raise RunError(f"{bad} (its header is not a JSON object); {fix}")
    try:
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        raise RunError(f"{bad} (a tensor without data offsets); {fix}") from None
    if 8 + n + end > size:
        raise RunError(f"{bad} (tensors need {8 + n + end} bytes, the file has {size}); {fix}")


def local_copy(ckpt_dir: str, cache_root: str | None = None) -> str:
    """A local folder with the checkpoint: remote folders (gs://, ...) are copied once into a cache.

    Only config, safetensors and tokenizer files are copied; a file already cached with the same
    size is not fetched again (the actor and the reference model load the same folder).
    """
    if "://" not in ckpt_dir:
        return ckpt_dir
    from fnmatch import fnmatch

    from rlexp.models.hub import ALLOW_PATTERNS

    fs, root = _fs(ckpt_dir)
    safetensors_files(ckpt_dir)  # names a missing shard before anything is copied
    cache = Path(cache_root or os.environ.get("RLEXP_MODEL_CACHE", "~/.cache/rlexp/models")).expanduser()
    dest = cache / ckpt_dir.split("://", 1)[0] / root.lstrip("/")
    dest.mkdir(parents=True, exist_ok=True)
    for info in fs.ls(root, detail=True):
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if info.get("type") == "directory" or not any(fnmatch(name, p) for p in ALLOW_PATTERNS):
            continue
        target = dest / name
        if not target.exists() or target.stat().st_size != info.get("size"):
            fs.get_file(info["name"], str(target))
    return str(dest)


def load_with_tunix(
    ckpt_dir: str,
    model_class: type,
    config: Any,
    key_mapping: Any,
    *,
    mesh: Any = None,
    preprocess_fn: Any = None,
    dtype: Any = None,
) -> Any:
    """Tunix's generic safetensors loader after the folder checks, with its errors turned into one line."""
    from tunix.models import safetensors_loader

    safetensors_files(ckpt_dir)
    try:
        return safetensors_loader.load_and_create_model(
            local_copy(ckpt_dir), model_class, config, key_mapping, mesh=mesh, preprocess_fn=preprocess_fn, dtype=dtype
        )
    except (AssertionError, ValueError) as err:
        raise RlexpError(f"{ckpt_dir}: weights do not fit the model option: {str(err).splitlines()[0]}") from err
