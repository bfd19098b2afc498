"""Checks of a whole sweep before its first job runs: a sweep expression that yields no job (an empty range, a
glob matching nothing, a range with step 0), and a value every job of a batch would be refused for.

A rule of `check_config` that refuses every job refuses the sweep once, in one line, before anything trains:
the 1,000-job `seed=range(0,1000) trainer.batch_size=0` ran the same refused job 1,000 times. The refused jobs
are recorded in sweep.json as failed, with the error, so `rlexp.report` and a resume see why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlexp.errors import ConfigError, RlexpError


def check_expressions(parsed: Sequence[Any], *, grid: bool) -> None:
    """Each sweep override of Hydra's parsed overrides yields at least one value; a range's step is not 0; an
    interval is a search space (`grid`: the basic sweeper, which has none) whose low is below its high, above 0 on
    a log scale."""
    for o in parsed:
        if not o.is_sweep_override():
            continue
        key = o.get_key_element().lstrip("+~")
        text = o.input_line.partition("=")[2] if o.input_line else "?"
        if not o.is_discrete_sweep():
            _check_interval(key, text, o.value(), grid=grid)
            continue
        if o.config_loader is None and text.startswith("glob("):
            continue  # it needs the config loader: the sweeper checks it
        step = getattr(o._value, "step", None)
        if step == 0:
            raise ConfigError(
                key, text, "a range's step must not be 0; write range(start, stop) or range(start, stop, step)"
            )
        try:
            values = list(o.sweep_iterator())
        except ValueError as err:
            raise ConfigError(key, text, f"not a sweep Hydra can expand ({err})") from None
        if not values:
            fix = "no option of the group matches it" if text.startswith("glob(") else "it yields no value"
            raise ConfigError(key, text, f"an empty sweep: {fix}; give at least one value (stop > start for a range)")


def _check_interval(key: str, text: str, interval: Any, *, grid: bool) -> None:
    """`interval(low, high)` (optuna's search space; `tag(log, ...)`: a log scale): what optuna would refuse with a
    traceback after sweep.json is written, and a grid sweep, which cannot draw from it, in one line first."""
    if grid:
        raise ConfigError(
            key,
            text,
            "an interval is a search space for hydra/sweeper=optuna (add it, with hydra.sweeper.n_trials=N); the grid "
            "sweeper takes values: a,b,c or range(start,stop,step)",
        )
    low, high = interval.start, interval.end
    if low > high:
        raise ConfigError(key, text, f"low {low:g} is above high {high:g}; write interval(low, high)")
    if "log" in interval.tags and low <= 0:
        raise ConfigError(key, text, f"a log interval needs low > 0, not {low:g}; raise it or drop tag(log, ...)")


EXACT_UP_TO = 32  # sweeps up to this many jobs are checked job by job (~50 ms each)
SAMPLE = 16  # larger ones: jobs spread over the sweep, when the first job's refused key is one no job varies


def _refusal(task: Any, local: bool) -> RlexpError | None:
    """The one-line error a job with this task config would end with before training, or None."""
    from rlexp.config.load import to_config
    from rlexp.config.values import check_values

    try:
        conf = to_config(task)
        check_values(conf)
        if local:  # a remote launcher's job is checked where it runs (rlexp.main.run: after the hand-off)
            from rlexp.checks import check_config
            from rlexp.envs import resolve

            check_config(resolve(conf))  # env=...: its scorer and sizes, as rlexp.main.run checks the job
    except RlexpError as err:
        return err
    return None


def _varied(key: str, overrides: Sequence[Sequence[str]]) -> bool:
    """Whether jobs differ in `key`, a key above it (a group choice) or a key below it."""
    per_job = [dict(o.lstrip("+~").partition("=")[::2] for o in job) for job in overrides]
    keys = {k for job in per_job for k in job}
    swept = [k for k in keys if len({job.get(k) for job in per_job}) > 1]
    return any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in swept)


def refuse_if_every_job_fails(config: Any, jobs: Sequence[tuple[int, list[str], Any]]) -> None:
    """`jobs`: (number, overrides, task() -> config). Stops at the first job that passes. When none does, records
    them failed in sweep.json and raises one RlexpError naming the first job's error. A sweep of more than
    EXACT_UP_TO jobs is refused only when its first job is refused on a key no job varies and SAMPLE jobs spread
    over it are refused for the same reason."""
    if not jobs:
        return
    local = str(config.hydra.launcher.get("_target_", "")).endswith("BasicLauncher")
    first = _refusal(jobs[0][2](), local)
    if first is None:
        return
    if len(jobs) <= EXACT_UP_TO:
        reasons = [first] + [_refusal(task(), local) for _, _, task in jobs[1:]]
        if any(r is None for r in reasons):
            return
        messages = [str(r) for r in reasons]
    else:
        key = getattr(first, "key", None)
        if key is None or _varied(key, [o for _, o, _ in jobs]):
            return
        step = max(1, len(jobs) // SAMPLE)
        for _, _, task in jobs[step::step]:
            again = _refusal(task(), local)
            if again is None or str(again) != str(first):
                return
        messages = [str(first)] * len(jobs)
    _record_failed(config, [(num, overrides) for num, overrides, _ in jobs], messages)
    same = len(set(messages)) == 1
    raise RlexpError(
        f"{messages[0]} (every one of the sweep's {len(jobs)} jobs is refused{' for this' if same else ''}; none ran)",
        exit_code=first.exit_code,
    )


def record_refused(config: Any, num: int, overrides: Sequence[str], err: BaseException) -> None:
    """One job that cannot be composed (a swept value of the wrong type) stops the sweep before any job runs:
    sweep.json records it failed with its error, and the sweep failed; the other jobs stay pending."""
    _record_failed(config, [(num, list(overrides))], [str(err) or type(err).__name__])


def _record_failed(config: Any, jobs: list[tuple[int, list[str]]], reasons: list[str]) -> None:
    from rlexp.sweep import manifest
    from rlexp.tracking import context

    directory = context.sweep_dir(config, config.hydra.sweep.dir)
    data = manifest.load(directory)
    if data is None:
        return
    for (num, overrides), reason in zip(jobs, reasons, strict=True):
        manifest.upsert_job(data, num, overrides=list(overrides), state="failed", error=reason[:500])
    data["state"] = "failed"
    manifest.save(directory, data)
