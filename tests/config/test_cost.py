"""Chip-hours and cost: the estimate's arithmetic, its overrides, and where it is printed and recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.estimates.cost import (
    PRICE_PER_CHIP_HOUR,
    estimate_cost,
    format_cost,
    roofline_step_s,
    summary_cost,
    sweep_total,
)
from tests.helpers import compose_conf


@pytest.mark.parametrize(("preset", "chips", "price"), [("gemma4_e4b_omi2", 32, 2.70), ("gpt_oss_20b_gsm8k", 32, 4.20)])
def test_seed_presets_are_priced_per_chip_hour(preset: str, chips: int, price: float) -> None:
    est = estimate_cost(compose_conf([f"experiment={preset}"]))
    assert est["chips"] == chips and est["price_per_chip_hour"] == price and est["steps"] == 500
    assert est["step_time_source"].startswith("roofline")
    hours = (500 * est["step_time_s"] + est["eval_s"]) / 3600
    assert est["hours"] == pytest.approx(hours, rel=1e-3)
    assert est["chip_hours"] == pytest.approx(hours * chips, rel=1e-3)
    assert est["cost_usd"] == pytest.approx(hours * chips * price, rel=1e-3)
    line = format_cost(est)
    assert f"x {chips} chips" in line and f"x ${price:.2f}" in line and "cloud.google.com/tpu/pricing" in line


def test_roofline_grows_with_the_work() -> None:
    base = compose_conf(["experiment=gemma4_e4b_omi2"])
    longer = compose_conf(
        ["experiment=gemma4_e4b_omi2", "trainer.max_completion_tokens=3000", "trainer.batch_size=256"]
    )
    half = compose_conf(["experiment=gemma4_e4b_omi2", "cost.completion_fill=0.5"])
    assert roofline_step_s(longer) > roofline_step_s(base) > roofline_step_s(half) > 0
    assert roofline_step_s(compose_conf([])) is None  # no peak numbers for a CPU


def test_overrides_step_time_price_and_calibration(tmp_path: Path) -> None:
    est = estimate_cost(
        compose_conf(["experiment=gpt_oss_20b_gsm8k", "cost.step_time_s=36", "cost.price_per_chip_hour=1.5"])
    )
    assert (est["step_time_s"], est["eval_s"], est["hours"]) == (36.0, None, 5.0)  # 500 x 36 s
    assert (est["chip_hours"], est["cost_usd"], est["price_source"]) == (160.0, 240.0, "cost.price_per_chip_hour")
    run = tmp_path / "calib"
    run.mkdir()
    steps = [{"step": 1, "perf/step_time_sec": 90.0}, *({"step": s, "perf/step_time_sec": 10.0 + s} for s in (2, 3, 4))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*steps, {"step": 4, "eval/x": 1}]))
    est = estimate_cost(compose_conf(["experiment=gpt_oss_20b_gsm8k", f"cost.calibration={run}"]))
    assert est["step_time_s"] == 13.0 and est["step_time_source"] == f"calibration {run}"  # median, step 1 dropped


def test_unknown_price_and_local_runs() -> None:
    gpu = estimate_cost(compose_conf(["slice=h200", "model=qwen3_0_6b"]))
    assert gpu["chips"] == 1 and gpu["chip_hours"] is not None and gpu["cost_usd"] is None
    assert "set cost.price_per_chip_hour" in format_cost(gpu)
    local = estimate_cost(compose_conf([]))
    assert local["chips"] == 0 and local["cost_usd"] == 0.0 and local["step_time_source"].startswith("measured")
    assert "local CPU" in format_cost(local)
    assert PRICE_PER_CHIP_HOUR["cpu"] == 0.0


def test_summary_has_estimate_and_actual_side_by_side(tmp_path: Path) -> None:
    cfg = compose_conf(["experiment=gemma4_e4b_omi2"])
    out = summary_cost(cfg, wall_seconds=1800.0)
    assert out["actual"] == {"wall_seconds": 1800.0, "chips": 32, "chip_hours": 16.0, "cost_usd": 43.2}
    assert out["estimate"]["chip_hours"] > out["actual"]["chip_hours"]
    broken = summary_cost(compose_conf([f"cost.calibration={tmp_path / 'gone'}"]), 1.0)
    assert "cost.calibration" in broken["estimate"]["error"]  # the summary is still written


def test_sweep_total_counts_what_it_cannot_price() -> None:
    runs = [estimate_cost(compose_conf(["experiment=gpt_oss_20b_gsm8k", f"cost.step_time_s={s}"])) for s in (36, 72)]
    runs.append(estimate_cost(compose_conf(["slice=h200", "model=qwen3_0_6b"])))
    total = sweep_total(runs)
    assert total["runs"] == 3 and total["runs_without_price"] == 1
    assert total["cost_usd"] == pytest.approx(runs[0]["cost_usd"] + runs[1]["cost_usd"])


@pytest.mark.parametrize(
    ("override", "key"),
    [("cost.completion_fill=0", "cost.completion_fill"), ("cost.step_time_s=-1", "cost.step_time_s"),
     ("cost.price_per_chip_hour=-2", "cost.price_per_chip_hour")],
)  # fmt: skip
def test_bad_cost_settings_are_one_line(override: str, key: str) -> None:
    from rlexp.errors import ConfigError

    with pytest.raises(ConfigError, match=f"^{key}="):
        estimate_cost(compose_conf([override]))
