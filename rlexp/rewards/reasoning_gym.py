"""`reasoning_gym`: scores a completion with the reasoning-gym dataset's own `score_answer(answer, entry)`.

The answer is taken from the completion as reasoning-gym's own tools take it (`reasoning_gym.utils.extract_answer`:
the last `<answer>...</answer>`); no tags, no answer (`score_answer(None, entry)`, 0 for every dataset). A row
names its entry in the field `entry`, JSON `{"task", "seed", "size", "index"}`: the entry is regenerated from the dataset
(deterministic per index), so its metadata reach the scorer exactly as the generator made them, in any process.
`tasks` maps each dataset name to its own config (rlexp.envs.reasoning_gym builds the rows with the same ones).
Per task, the scorer counts calls, errors and latency since the last `drain_tasks()` (the env's metrics).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from typing import Any

from rlexp.rewards.registry import RewardFn, register


def dataset(task: str, seed: int, size: int, config: dict[str, Any]) -> Any:
    """reasoning-gym's dataset `task` under `config`: `size` entries drawn from `seed`."""
    import reasoning_gym

    return reasoning_gym.create_dataset(task, **{**config, "seed": seed, "size": size})


@register("reasoning_gym")
def reasoning_gym_reward(tasks: dict[str, Any] | None = None) -> RewardFn:
    """Each completion scored by its row's reasoning-gym dataset; `tasks`: {name: that dataset's config}."""
    from reasoning_gym.utils import extract_answer

    configs = {k: dict(v or {}) for k, v in (tasks or {}).items()}
    cache: dict[tuple[str, int, int], Any] = {}
    counts: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])  # task -> [calls, errors, seconds]

    def entry_of(ref: str) -> tuple[str, Any, dict[str, Any]]:
        key = json.loads(ref)
        task, seed, size = key["task"], int(key["seed"]), int(key["size"])
        if (task, seed, size) not in cache:
            cache[task, seed, size] = dataset(task, seed, size, configs.get(task, {}))
        ds = cache[task, seed, size]
        return task, ds, ds[int(key["index"])]

    def score(prompts: Any, completions: Any, entry: Any = None, **_: Any) -> list[float]:
        if entry is None:
            raise ValueError("rows carry no `entry` field: use env=reasoning_gym, whose rows name their entries")
        out = []
        for completion, ref in zip(completions, entry, strict=True):
            t0, task = time.monotonic(), "?"
            try:
                task, ds, item = entry_of(str(ref))
                value = float(ds.score_answer(extract_answer(str(completion)), item))
            except Exception as err:  # noqa: BLE001 - one row's failure is its own errored value
                score.last_error = f"{task}: {type(err).__name__}: {err}"  # type: ignore[attr-defined]
                value = math.nan
            c = counts[task]
            c[0], c[1], c[2] = c[0] + 1, c[1] + (not math.isfinite(value)), c[2] + time.monotonic() - t0
            out.append(value)
        return out

    def drain_tasks() -> dict[str, dict[str, float]]:
        """Per task since the last drain: calls, errors and the mean scoring latency in seconds."""
        out = {t: {"calls": c[0], "errors": c[1], "latency_mean_s": c[2] / c[0]} for t, c in counts.items() if c[0]}
        counts.clear()
        return out

    score.last_error = None  # type: ignore[attr-defined]
    score.drain_tasks = drain_tasks  # type: ignore[attr-defined]
    return score
