"""The user command: reward=code with an arith-grading snippet trains the default task through the sandbox."""

from __future__ import annotations

import json

import pytest

from rlexp.rewards.sandbox import bwrap_problem
from tests.helpers import run_rlexp

# parses the completion's leading integer and compares it with the row's answer, like reward=arith's first term
ARITH_SNIPPET = (
    'def evaluate(example, response): import re; m = re.match(r"\\s*(-?\\d+)", response["text"]); '
    'return float(bool(m) and int(m.group(1)) == int(example["answer"]))'
)


@pytest.mark.slow
def test_reward_code_learns_the_default_task_like_the_builtin_reward(tmp_path) -> None:  # noqa: ANN001
    assert bwrap_problem() is None, (
        f"the sandbox tests need bubblewrap (scripts/install_system_deps.sh): {bwrap_problem()}"
    )
    run = tmp_path / "run"
    snippet = f"reward.functions.0.kwargs.snippet='{ARITH_SNIPPET}'"
    # 200 of the default 300 steps: pass@1 gains +0.197, +0.211, +0.215 at seeds 0, 1, 2 (150 steps: +0.139 at seed 0)
    cut = ["trainer.max_steps=200", "trainer.eval_every=200", "trainer.checkpoint_every=200"]
    run_rlexp("reward=code", snippet, *cut, "logger=none", f"hydra.run.dir={run}", timeout=1200, check=True)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval"]["gain"]["pass_at_1"] >= 0.15, summary["eval"]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(s.get("rewards/code/mean") is not None for s in steps)
    assert all(s.get("rewards/code/errors", 0.0) == 0.0 for s in steps)
