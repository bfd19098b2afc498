"""Resume a sweep: a job whose run dir already holds a completed summary.json is not trained again.

Hydra rebuilds the same job list in the same order for the same sweep arguments, so job N of the
resumed invocation is job N of the first one (the callback checks the overrides match). Jobs that
were cut short train again and pick up their own checkpoints (`trainer.resume=auto`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from rlexp import storage
from rlexp.sweep.manifest import dig
from rlexp.tracking import context

log = logging.getLogger(__name__)


def completed_objective(job_dir: str, objective: str) -> float | None:
    """The objective recorded by a completed job in `job_dir`, or None when it did not complete."""
    summary = storage.read_json(storage.join(job_dir, "summary.json"))
    if not isinstance(summary, dict) or summary.get("status") != "completed":
        return None
    value = dig(summary, objective)
    recorded = summary.get("objective")
    if value is None and isinstance(recorded, dict) and recorded.get("name") in (None, objective):
        value = recorded.get("value")
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def skip_if_completed(cfg: Any) -> float | None:
    """Inside a resumed multirun job: the earlier objective when this job already completed, else None."""
    if not context.in_multirun() or not context._get(cfg, "sweep.resume"):
        return None
    directory = context.job_dir(cfg)
    value = completed_objective(directory, str(context._get(cfg, "objective")))
    if value is not None:
        log.info("sweep resume: %s completed earlier (objective %s); not run again", directory, value)
    return value
