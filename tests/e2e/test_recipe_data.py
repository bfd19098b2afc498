"""A capped file dataset with over-long prompts trains the steps asked for (filter first, then cap).

Runs the user's command, `python -m rlexp dataset=jsonl dataset.source=<file> ...`, on the
builtin tiny model. Half the rows are longer than trainer.max_prompt_tokens; the train cap of
64 rows must still give 64 rows, i.e. 8 steps of 8 prompts, rather than about 32 rows and a
"gives only 4 steps" stop after the model has loaded.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import run_rlexp

pytestmark = pytest.mark.slow

LONG = "1+" * 12 + "1="  # 25 characters: longer than the 16-token prompt budget of the tiny model


def test_capped_split_with_over_long_prompts_trains_all_steps(tmp_path) -> None:  # noqa: ANN001
    rows = []
    for i in range(400):
        a, b = i % 20, (i * 7) % 20
        rows.append({"question": LONG if i % 2 else f"{a}+{b}=", "answer": str(12 * 1 + 1 if i % 2 else a + b)})
    source = tmp_path / "arith.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = tmp_path / "run"
    cmd = [
        "dataset=jsonl", f"dataset.source={source}", "dataset.train_size=64",
        "dataset.eval_size=16", "dataset.eval_fraction=0.2", "trainer.max_steps=8", "trainer.eval_every=4",
        "trainer.checkpoint_every=4", "trainer.eval_prompts=16", "trainer.eval_samples=1", "logger=none",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = run_rlexp(*cmd, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "gives only" not in proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 8
    data = summary["data"]
    assert (data["train_rows"], data["eval_rows"]) == (64, 16)  # the caps, counted after the filter
    assert data["skipped"]["prompt_too_long"] >= 64  # about as many long rows as short ones were met
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "rewards/sum" in r] == list(range(1, 9))
