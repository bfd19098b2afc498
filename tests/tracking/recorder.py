"""A tracker backend for tests of `rlexp.tracking.process`: it appends every call, and the pid of the process
that made it, to a JSON-lines file, and fails where told to (`fail` = "start", or a step number) or stalls."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class Recorder:
    def __init__(
        self, path: str, fail: str | int | None = None, start_delay: float = 0.0, stall: tuple[int, float] = (-1, 0.0)
    ) -> None:
        time.sleep(start_delay)
        self.stall = stall  # (step, seconds): a backend that stops reading for a while at that step
        if fail == "start":
            raise PermissionError("wandb: 401 Unauthorized")
        self.path, self.fail = Path(path), fail
        self._write("start")

    def _write(self, call: str, *args: Any) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps([call, os.getpid(), *args]) + "\n")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if step == self.fail:
            raise ConnectionError("wandb service went away")
        if step == self.stall[0]:
            time.sleep(self.stall[1])
        self._write("log", step, metrics)

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        self._write("finish", summary, exit_code)


def calls(path: Path) -> list[list[Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
