"""The user commands: reward=code with an arith-grading snippet trains the default task through the sandbox, and
conf/reward/README.md's reward=code_tests example, read from the README, trains on the sandbox's scores."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from rlexp.rewards.registry import make_reward_fn
from rlexp.rewards.sandbox import bwrap_problem
from tests.helpers import REPO, run_rlexp

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


def readme_command(doc: Path, starts: str) -> list[str]:
    """The arguments after `rlexp` of the command in `doc`'s bash blocks that starts with `starts`, its backslash
    continuations joined: the test runs what the document says, so neither can change without the other."""
    in_bash, lines = False, []
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            in_bash = line.strip() == "```bash"
        elif in_bash:
            lines.append(line)
    commands = " ".join(lines).replace("\\ ", " ").split("rlexp ")  # one command a line, joined at `\`
    found = [c.strip() for c in commands if ("rlexp " + c).startswith(starts)]
    assert len(found) == 1, f"{doc}: {len(found)} commands start with {starts!r}"
    return shlex.split(found[0])


@pytest.mark.slow
def test_the_readme_code_tests_example_trains_on_the_sandboxs_scores(tmp_path: Path) -> None:
    """conf/reward/README.md's `rlexp reward=code_tests ...` as written (a run dir of its own added): it trains its
    steps, and every reward is the sandbox's answer (no errored value, the rewards recorded in samples.jsonl are
    what the code_tests reward gives those completions, and that reward passes a row's reference solution)."""
    assert bwrap_problem() is None, f"the sandbox tests need bubblewrap: {bwrap_problem()}"
    args = readme_command(REPO / "conf" / "reward" / "README.md", "rlexp reward=code_tests")
    assert "dataset.source=tests/fixtures/code/problems.jsonl" in args, args
    run = tmp_path / "run"
    proc = run_rlexp(*args, f"hydra.run.dir={run}", cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    steps = int(next(a for a in args if a.startswith("trainer.max_steps=")).split("=")[1])
    assert summary["status"] == "completed" and summary["train"]["steps"] == steps, summary
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, steps + 1))
    scored = [r for r in rows if "rewards/code_tests/mean" in r or "eval/rewards/code_tests/mean" in r]
    assert len(scored) == steps + 1  # the steps' rows, the eval before (the last step's row holds the eval after)
    for r in scored:
        for kind in ("errors", "non_finite", "rpc_error_ratio"):
            assert r.get(f"rewards/code_tests/{kind}", 0.0) == 0.0 == r.get(f"eval/rewards/code_tests/{kind}", 0.0)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["reward"] is not None for s in samples)
    score = make_reward_fn("code_tests")
    try:
        again = score([s["prompt"] for s in samples], [s["completion"] for s in samples],
                      answer=[s["answer"] for s in samples])  # fmt: skip
        problem = json.loads((REPO / "tests/fixtures/code/problems.jsonl").read_text().splitlines()[0])
        right = score([problem["question"]], [f"```python\n{problem['solution']}```"], answer=[problem["tests"]])
    finally:
        score.close()
    assert again == [s["rewards"]["code_tests"] for s in samples]
    assert right == [1.0]
