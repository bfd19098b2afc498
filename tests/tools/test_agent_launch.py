"""Multi-turn runs beyond one process: the tool demo on two JAX processes (slice=cpu-2x1, as a launcher starts
them), and a GKE dry run of a multi-turn config that renders a valid JobSet carrying the agent group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlexp.config.hardware import tpu_slice
from rlexp.launch.jobset_checks import check_jobset
from tests.distributed.test_two_processes import start_two, tails, wait_all
from tests.launch.conftest import run_cli


@pytest.mark.slow
def test_the_tool_demo_trains_on_two_processes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # One step: the episodes of a training step and of the evals before and after it, each multi-turn shape
    # compiled again on process 1 (JAX caches compiled programs from process 0 only); a checkpoint at the end.
    short = (
        "trainer.max_steps=1",
        "trainer.eval_every=1",
        "trainer.checkpoint_every=1",
        "trainer.eval_prompts=2",
        "trainer.eval_samples=1",
    )  # after SHORT: these win
    codes = wait_all(start_two(run_dir, tmp_path, ("experiment=tools_demo", *short)), tmp_path)
    assert codes == [0, 0], tails(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["train"]["steps"], summary["train"]["processes"]) == ("completed", 1, 2)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and "agent/turns_mean" in rows[1]
    assert (run_dir / "checkpoints" / "actor" / "1").is_dir()
    assert "agent_tool_calls_mean" in summary["eval"]["after"]


@pytest.mark.slow
def test_a_multi_turn_config_renders_a_valid_jobset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    run_dir = tmp_path / "run"
    args = ["model=qwen3_0_6b", "slice=v6e-8", "agent=tools", "chat_template=chatml", "agent.max_turns=3"]
    args += ["trainer.max_prompt_tokens=256", "trainer.max_completion_tokens=256", "hydra.launcher.dry_run=true"]
    assert run_cli(monkeypatch, *args, f"hydra.run.dir={run_dir}") == 0
    js = yaml.safe_load((run_dir / "jobset.yaml").read_text())
    check_jobset(js, tpu_slice("v6e-8"))
    assert "agent=tools" in (run_dir / "jobset.yaml").read_text()
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    assert resolved["agent"]["max_turns"] == 3 and resolved["agent"]["tools"] == [{"name": "calculator", "kwargs": {}}]
