"""The tool demo through the command a user types: `rlexp experiment=tools_demo`, stopped by SIGTERM and resumed by
the same command, learns to use its calculator (pass@1 up by >= 0.15), and its run dir holds episodes:
conversations, agent/* metrics, a report that shows them."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_rlexp, sigterm_at_progress

DEMO = ["experiment=tools_demo", "logger=none"]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):  # noqa: ANN001, ANN201
    """The demo's command stopped by SIGTERM a fifth of the way in (a checkpoint after that step), then the same
    command again, which resumes there: one run's cost covers both the demo and multi-turn resume."""
    run_dir = tmp_path_factory.mktemp("tools_demo")
    code, rest = sigterm_at_progress(*DEMO, f"hydra.run.dir={run_dir}", step_line="rlexp: step 6/30")
    assert code == 1, rest[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    resumed = run_rlexp(*DEMO, f"hydra.run.dir={run_dir}", timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return run_dir, summary


@pytest.fixture(scope="module")
def demo(stopped):  # noqa: ANN001, ANN201
    return stopped[0]


@pytest.mark.slow
def test_the_demo_learns_to_use_the_tool(demo) -> None:  # noqa: ANN001
    summary = json.loads((demo / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["eval"]["gain"]["pass_at_1"] >= 0.15
    after = summary["eval"]["after"]
    assert after["agent_tool_calls_mean"] > summary["eval"]["before"]["agent_tool_calls_mean"]


@pytest.mark.slow
def test_samples_metrics_and_report_hold_episodes(demo) -> None:  # noqa: ANN001
    rows = [json.loads(x) for x in (demo / "samples.jsonl").read_text().splitlines()]
    with_tool = [r for r in rows if any(m["role"] == "tool" for m in r["conversation"])]
    assert with_tool, "no episode called the calculator"
    turn = with_tool[0]["conversation"]
    assert turn[0]["tool_calls"][0]["name"] == "calculator" and turn[-1]["role"] == "assistant"
    metrics = [json.loads(x) for x in (demo / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if "agent/turns_mean" in m]
    assert len(train) == 30
    assert {"agent/tool_calls_mean", "agent/tool_errors", "agent/episodes_truncated"} <= set(train[0])
    assert all(1.0 <= m["agent/turns_mean"] <= 2.0 for m in train)
    out = demo / "report.html"
    assert run_rlexp(str(demo), "--out", str(out), module="rlexp.report").returncode == 0
    page = out.read_text()
    assert 'class="turn">calculator:' in page and 'data-metric="agent/tool_calls_mean"' in page


@pytest.mark.slow
def test_sigterm_then_the_same_command_resumes_the_episodes(stopped) -> None:  # noqa: ANN001
    run_dir, at_stop = stopped
    assert at_stop["status"] == "interrupted" and 6 <= at_stop["train"]["steps"] < 30
    assert (run_dir / "checkpoints" / "actor" / str(at_stop["train"]["steps"])).is_dir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["train"]["steps"]) == ("completed", 30)
    steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["step"] > 0]
    trained = [r for r in steps if "loss" in r]
    assert [r["step"] for r in trained] == list(range(1, 31))  # each step once, across the stop
    assert all("agent/turns_mean" in r for r in trained)


@pytest.mark.slow
def test_a_sweep_of_the_demo_trains_each_job_on_episodes(tmp_path) -> None:  # noqa: ANN001
    sweep = tmp_path / "sweep"
    short = ["trainer.max_steps=2", "trainer.eval_every=2", "trainer.checkpoint_every=2", "trainer.eval_prompts=8"]
    out = run_rlexp("-m", *DEMO, "seed=0,1", *short, f"hydra.sweep.dir={sweep}", "sweep.report=false", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    manifest = json.loads((sweep / "sweep.json").read_text())
    assert manifest["state"] == "completed" and [j["state"] for j in manifest["jobs"]] == ["completed"] * 2
    for job in manifest["jobs"]:
        rows = [json.loads(x) for x in (sweep / job["output_dir"] / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows if "agent/turns_mean" in r] == [1, 2]


@pytest.mark.slow
def test_a_tool_failing_every_call_stops_the_run_naming_it(tmp_path) -> None:  # noqa: ANN001
    """A calculator given a keyword it does not take fails every call: the run stops in one line naming the tool
    and its error (agent.tool_error_budget), exit 1, before any update trains on the error messages, instead of
    "completing" with greedy 0.25 -> 0.00."""
    run = tmp_path / "run"
    broken = "agent.tools=[{name: calculator, kwargs: {precision: 3}}]"
    short = ["trainer.max_steps=6", "trainer.eval_prompts=8", "trainer.eval_samples=1"]
    out = run_rlexp(*DEMO, broken, *short, f"hydra.run.dir={run}", timeout=400)
    assert out.returncode == 1, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("rlexp: error:")]
    assert len(errors) == 1 and errors[0].startswith("rlexp: error: agent.tool_error_budget=1: tool calculator failed")
    assert "unexpected keyword argument 'precision'" in errors[0]
    summary = json.loads((run / "summary.json").read_text())
    # step 1's rollout met the broken tool: the run stops before training on its error messages
    assert summary["status"] == "failed" and summary["train"]["steps"] == 0
    print("\n" + errors[0])


@pytest.mark.slow
def test_rlexp_eval_of_the_demo_runs_episodes_as_the_runs_eval(demo, tmp_path) -> None:  # noqa: ANN001
    """`rlexp eval RUN` of an agent=tools run samples episodes (tool calls answered, their outputs fed back), as
    the run's own evals do: the final checkpoint's eval equals the run's `after` eval. Scored as single completions
    (no episodes), the demo's answers come after a tool call that is never answered."""
    out = tmp_path / "eval.json"
    done = run_rlexp(str(demo), "--out", str(out), module="rlexp.eval", timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads(out.read_text())["metrics"]
    after = json.loads((demo / "summary.json").read_text())["eval"]["after"]
    assert metrics["pass_at_1"] == pytest.approx(after["pass_at_1"], abs=1e-6), (metrics, after)
    assert metrics["agent_tool_calls_mean"] == pytest.approx(after["agent_tool_calls_mean"], abs=1e-6)
