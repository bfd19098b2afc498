"""The memory and cost estimates of an environment's run take its own lengths: reasoning-gym's generated prompts as
the session pads them, an env class's turns; the plan and `rlexp validate` report the same estimates."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rlexp import envs
from rlexp.checks import check_config, estimates
from rlexp.config.load import compose, to_config
from rlexp.estimates.cost import roofline_step_s
from rlexp.estimates.lengths import Lengths, config_lengths
from rlexp.estimates.memory import estimate_memory, format_estimate

LONG = ["env.tasks.letter_counting.config.min_words=6", "env.tasks.letter_counting.config.max_words=8"]


def conf(*overrides: str):  # noqa: ANN201
    return envs.resolve(to_config(compose(["experiment=rg_demo", "trainer.max_prompt_tokens=120", *overrides])))


def test_the_estimate_takes_the_longest_generated_prompt_as_the_session_pads_it() -> None:
    from rlexp.data.templates import prompt_width, render_splits
    from rlexp.models.loader import load_tokenizer

    c = conf()
    n = envs.run_lengths(c)
    tok = load_tokenizer(c.model)
    rendered = render_splits(envs.load_rows(c), c.data_template, c.chat_template, tok, 120)
    assert n.prompt == prompt_width([r["prompt"] for r in rendered.train + rendered.eval], tok, 120) == 88
    assert n.completion == 8 and n.turns == 1 and "longest of 3168 prompts in tokens" in n.source
    est = estimates(c, check_config(c))
    assert est["memory"]["lengths"] == est["cost"]["lengths"] == dataclasses.asdict(n)
    assert "prompts 88 + completions 8 tokens (env=reasoning_gym" in format_estimate(est["memory"])


def test_a_task_with_longer_prompts_raises_the_memory_and_cost_estimates() -> None:
    short, long = conf("slice=v5p-8"), conf("slice=v5p-8", *LONG)
    a, b = estimates(short, check_config(short)), estimates(long, check_config(long))
    assert b["memory"]["lengths"]["prompt"] > a["memory"]["lengths"]["prompt"]
    assert b["memory"]["kv_cache"] > a["memory"]["kv_cache"] and b["memory"]["activations"] > a["memory"]["activations"]
    assert roofline_step_s(long, envs.run_lengths(long)) > roofline_step_s(short, envs.run_lengths(short))
    # below the caps: the caps alone would have sized both runs alike, and larger
    caps = estimate_memory(short)
    assert "lengths" not in caps and caps["kv_cache"] > a["memory"]["kv_cache"]


def test_without_the_tokenizer_here_the_prompts_bytes_bound_their_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    import rlexp.models.loader

    monkeypatch.setattr(rlexp.models.loader, "local_tokenizer", lambda model: None)
    n = envs.run_lengths(conf("seed=7"))  # another config: measured afresh
    assert n.prompt == 86 and "UTF-8 bytes (model tiny_rg's tokenizer is not here)" in n.source  # 85 bytes + BOS


def test_an_env_class_is_costed_per_turn() -> None:
    c = envs.resolve(
        to_config(
            compose(
                [
                    "experiment=tools_demo",
                    "env=class",
                    "env.target=tests/envs/calc_env.py:CalcEnv",
                    "slice=v5p-8",
                    "agent.max_turn_tokens=16",
                ]
            )
        )
    )
    n = envs.run_lengths(c)
    assert (n.turns, n.turn) == (c.agent.max_turns, 16) and n.turns > 1 and "turns of 16 tokens" in n.source
    one_turn = dataclasses.replace(n, turns=1)
    assert roofline_step_s(c, n) > roofline_step_s(c, one_turn)
    assert estimates(c, check_config(c))["cost"]["lengths"]["turns"] == n.turns


def test_without_an_env_the_estimates_are_the_caps_as_before() -> None:
    c = to_config(compose(["slice=v5p-8", "model=qwen3_0_6b"]))
    assert envs.run_lengths(c) is None
    assert config_lengths(c) == Lengths(c.trainer.max_prompt_tokens, c.trainer.max_completion_tokens)
    est = estimates(c, check_config(c))
    assert "lengths" not in est["memory"] and "lengths" not in est["cost"]


@pytest.mark.slow
def test_validate_reports_the_estimates_the_plan_holds(tmp_path: Path) -> None:
    from tests.helpers import run_rlexp

    # rg_demo's own lengths and test_adaptive's evals (12 prompts): their compiled programs
    args = ["experiment=rg_demo", "logger=none", "trainer.max_steps=1"]
    args += ["trainer.eval_every=1", "trainer.checkpoint_every=1", "trainer.eval_prompts=12", "cost.step_time_s=0.5"]
    run_rlexp(*args, f"hydra.run.dir={tmp_path / 'v'}", "validate.rows=4", module="rlexp.validate", check=True)
    run_rlexp(*args, f"hydra.run.dir={tmp_path / 'r'}", check=True)
    validation = json.loads((tmp_path / "v" / "validation.json").read_text())
    plan = json.loads((tmp_path / "r" / "plan.json").read_text())
    assert validation["memory"] == plan["memory"] and validation["cost"] == plan["cost"]
    # the longest generated prompt (88 tokens, the estimate test above), not the cap trainer.max_prompt_tokens=96
    assert plan["memory"]["lengths"]["prompt"] == 88 and "env=reasoning_gym" in plan["memory"]["lengths"]["source"]
