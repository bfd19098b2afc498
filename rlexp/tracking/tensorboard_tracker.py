"""TensorBoard tracker: scalars under `<run dir>/tensorboard/` with the run-dir metric names.

A run dir on gs:// (or any fsspec URL) receives the event files itself, as the seeds' TensorBoard dir
`{base_output_directory}/{run_name}/tensorboard/` does, rather than a pod-local folder lost with the pod:
tensorboardX writes through a record writer registered for the URL's protocol that keeps the event file
in memory and rewrites the object on every flush (object stores cannot append).
"""

from __future__ import annotations

import io
import math
from typing import Any

from rlexp import storage
from rlexp.config.schema import RlexpConfig
from rlexp.tracking.context import RunContext

REMOTE_FLUSH_S = 5


class FsspecRecordWriter:
    """One event file at an fsspec URL: appended to in memory, written out whole on flush and close."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.buffer = io.BytesIO()
        self.flushed = 0  # bytes written out so far: a flush without new records costs nothing

    def write(self, data: bytes) -> None:
        self.buffer.write(data)

    def flush(self) -> None:
        import fsspec

        if self.buffer.tell() == self.flushed:
            return
        with fsspec.open(self.path, "wb") as f:
            f.write(self.buffer.getvalue())
        self.flushed = self.buffer.tell()

    def close(self) -> None:
        self.flush()


class FsspecWriterFactory:
    """tensorboardX's writer-factory interface (`register_writer_factory`), for fsspec URLs."""

    def open(self, path: str) -> FsspecRecordWriter:
        return FsspecRecordWriter(path)

    def directory_check(self, path: str) -> None:
        import fsspec

        fs, root = fsspec.core.url_to_fs(path)
        fs.makedirs(root, exist_ok=True)


def _use_fsspec_for(url: str) -> None:
    from tensorboardX.record_writer import register_writer_factory

    # replaces tensorboardX's own gs:// writer (google-cloud-storage), so every URL goes through fsspec
    # like the other run files (rlexp.storage)
    register_writer_factory(url.split("://", 1)[0], FsspecWriterFactory())


class TensorboardTracker:
    def __init__(self, cfg: RlexpConfig, run_dir: str, ctx: RunContext) -> None:
        from tensorboardX import SummaryWriter

        base = cfg.logger.dir or run_dir
        self.logdir = storage.join(base, "tensorboard")
        remote = storage.is_url(self.logdir)
        if remote:
            _use_fsspec_for(self.logdir)
        # tensorboardX's writer thread writes queued events and flushes every flush_secs: remotely that is
        # when a step's scalars reach the object (one upload per flush, and only when there is new data)
        self.writer = SummaryWriter(logdir=self.logdir, flush_secs=REMOTE_FLUSH_S if remote else 120)
        self.writer.add_text("config/overrides", " ".join(ctx.overrides) or "(none)", 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(name, float(value), int(step))
        self.writer.flush()

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        objective = summary.get("objective")
        if isinstance(objective, dict) and isinstance(objective.get("value"), int | float):
            self.writer.add_scalar(
                "objective", float(objective["value"]), int((summary.get("train") or {}).get("steps", 0))
            )
        self.writer.close()
