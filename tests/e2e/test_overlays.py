"""Experiment overlays through the user's command: an overlay's values win over the root config's."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.helpers import run_rlexp


def composed(*overrides: str) -> dict:
    """`python -m rlexp <overrides> --cfg job --resolve`, parsed."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = run_rlexp(*overrides, "--cfg", "job", "--resolve", env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return yaml.safe_load(proc.stdout)


@pytest.mark.parametrize(
    ("preset", "run_name"),
    [("gemma4_e4b_omi2", "gemma4-e4b-omi2-grpo"), ("gpt_oss_20b_gsm8k", "gpt-oss-20b-gsm8k-grpo")],
)
def test_seed_overlay_keeps_its_run_name_and_the_seed_rewards(preset: str, run_name: str) -> None:
    cfg = composed(f"experiment={preset}")
    assert cfg["run_name"] == run_name  # not the root's ${model.name}-${dataset.name}-${trainer.algorithm}
    assert cfg["reward"]["name"] == "maxtext_math"
    fns = [f["fn"] for f in cfg["reward"]["functions"]]
    assert fns == ["check_numbers", "match_format_exactly", "match_format_approximately"]
    assert cfg["seed"] == 0  # root values the overlay does not set stay


def test_root_run_name_without_an_overlay_and_the_command_line_wins_over_both() -> None:
    assert composed()["run_name"] == "tiny-arith-grpo"
    assert composed("experiment=quick")["run_name"] == "tiny-arith-grpo"  # quick sets no run_name
    cfg = composed("experiment=gemma4_e4b_omi2", "run_name=mine", "reward=math_format")
    assert cfg["run_name"] == "mine" and cfg["reward"]["name"] == "math_format"
