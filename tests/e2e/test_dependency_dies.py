"""A dependency that dies mid-run, through the user's command: a judge (`reward=judge`), a reward service
(`reward=http`) and the tool demo's calculator served by an `http` tool, on loopback, that turn after N requests
to 5xx bursts, answers slower than the timeout, or a closed port (tests/switch_server.py). The run either rides it
out within its retry budget, and its metrics say so (`rewards/<name>/judge_retries`, `rewards/<name>/retries`,
`agent/tool_retries`), or stops in one line with a restorable checkpoint and, once the server is back, the same
command resumes it; never a completed run with numbers made of errors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.faults import compare_runs, run_state
from tests.helpers import run_rlexp
from tests.switch_server import SwitchServer

pytestmark = pytest.mark.slow

J = "reward.functions.0.kwargs"
STEPS = 4  # a checkpoint (step 2) before each outage, a step after it, evals at 0, 2 and 4
# the same shapes as tests/faults.py's judge workload (one compile for both)
TINY = [f"trainer.max_steps={STEPS}", "trainer.eval_every=2", "trainer.checkpoint_every=2", "trainer.eval_prompts=4",
        "trainer.eval_samples=1", "logger=none", "trainer.batch_size=2", "trainer.num_generations=4"]  # fmt: skip
PER_STEP, PER_EVAL = 2 * 4, 4 * 2  # completions a step; an eval's (eval_prompts x (eval_passes + 1), one pass each)


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _run(over: list[str], run: Path):  # noqa: ANN202
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return run_rlexp(*over, *TINY, f"hydra.run.dir={run}", env=env, timeout=600)


def _stops_then_resumes(
    server: SwitchServer, over: list[str], run: Path, key: str | None, says: str = "reward.max_error_ratio"
) -> list[dict]:
    """The run stops in one line (exit 1) that `says` why, with a checkpoint; healed, the same command completes
    it, and no training row of reward `key` (None: no reward's) holds an errored value."""
    stopped = _run(over, run)
    errors = [ln for ln in stopped.stderr.splitlines() if ln.startswith("rlexp: error:")]
    assert stopped.returncode == 1 and len(errors) == 1, stopped.stderr[-3000:]
    assert says in errors[0] and "Traceback" not in stopped.stderr, errors
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed"
    saved = [p.name for p in (run / "checkpoints" / "actor").iterdir() if p.name.isdigit()]
    assert saved, "no restorable checkpoint"
    server.heal()
    resumed = _run(over, run)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"from step {max(map(int, saved))}" in resumed.stderr
    rows = _rows(run)
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, STEPS + 1)), "a training row lost or doubled"
    evals = [r["step"] for r in rows if "eval/pass_at_1" in r]
    assert evals[:3] == [0, 2, 4] and len(evals) <= 4, evals  # before, every 2 steps, after (maybe merged)
    train = [r for r in rows if f"rewards/{key}/errors" in r]
    assert key is None or len(train) == STEPS and all(r[f"rewards/{key}/errors"] == 0 for r in train), "made of errors"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    return rows


def test_a_judge_answering_5xx_bursts_is_ridden_out_then_one_that_stops_answering_stops_the_run_and_resumes(
    tmp_path: Path,
) -> None:
    """One judge, one at a time: requests 9-11 (step 1's first item) get a 503 each, ridden out by the judge's
    retries and counted in step 1's row, which the resume keeps; the port closes after request 39, inside step 3,
    after step 2's checkpoint and eval (8 requests each for eval 0, steps 1 and 2 and eval 2, the 3 refused ones)."""
    server = SwitchServer(after=PER_EVAL, then="5xx", burst=3, down_after=PER_EVAL * 2 + 2 * PER_STEP + 3 + 4)
    try:
        over = ["reward=judge", f"{J}.base_url={server.url('v1')}", f"{J}.model=m", f"{J}.retries=3",
                f"{J}.backoff_s=0.01", f"{J}.timeout_s=5", f"{J}.max_concurrency=1"]  # fmt: skip
        rows = _stops_then_resumes(server, over, tmp_path / "run", "judge")
    finally:
        server.close()
    train = [r for r in rows if "rewards/judge/judge_retries" in r]
    assert [r["rewards/judge/judge_retries"] for r in train] == [3, 0, 0, 0] and server.refused == 3
    assert all(r["rewards/judge/rpc_error_ratio"] == 0 for r in train)


def test_a_reward_service_slower_than_its_timeout_stops_the_run_and_resumes(tmp_path: Path) -> None:
    # batch_size 4: requests, not items; the probe, then 2 each for eval 0, steps 1-2 and eval 2: slow in step 3
    server = SwitchServer(after=1 + 4 * 2, then="slow", slow_s=1.5)
    try:
        over = ["reward=http", f"{J}.url={server.url()}", f"{J}.timeout_s=0.3", f"{J}.retries=1",
                f"{J}.backoff_s=0.01", f"{J}.batch_size=4", f"{J}.max_concurrency=1"]  # fmt: skip
        rows = _stops_then_resumes(server, over, tmp_path / "run", "remote")
    finally:
        server.close()
    train = [r for r in rows if "rewards/remote/retries" in r]
    assert train and all(r["rewards/remote/failed_batches"] == 0 for r in train)


def test_a_reward_service_answering_5xx_bursts_is_ridden_out_with_retries_in_metrics(tmp_path: Path) -> None:
    server = SwitchServer(after=1 + 2 + 2, then="5xx", burst=2)  # the probe, the eval's 2 batches, step 1's 2
    try:
        over = ["reward=http", f"{J}.url={server.url()}", f"{J}.retries=3", f"{J}.backoff_s=0.01",
                f"{J}.batch_size=4", f"{J}.max_concurrency=1"]  # fmt: skip
        proc = _run(over, tmp_path / "run")
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    train = [r for r in _rows(tmp_path / "run") if "rewards/remote/retries" in r]
    assert sum(r["rewards/remote/retries"] for r in train) == 2 == server.refused
    assert all(r["rewards/remote/errors"] == 0 and r["rewards/remote/failed_batches"] == 0 for r in train)


def _calculator_service(server: SwitchServer) -> list[str]:
    """The tool demo with its calculator served over http (an `http` tool offered to the model as `calculator`)."""
    tool = f"{{name: http, kwargs: {{url: '{server.url()}', name: calculator, retries: 2, backoff_s: 0.01}}}}"
    return ["experiment=tools_demo", f"agent.tools=[{tool}]"]


def _without_retries(run: Path) -> dict:
    """run_state less `agent/tool_retries` (the faults ridden out are all that may differ from a healthy run)."""
    state = run_state(run)
    state["rows"] = [{k: v for k, v in r.items() if "tool_retries" not in k} for r in state["rows"]]
    state["evals"] = {k: {m: v for m, v in e.items() if "tool_retries" not in m} for k, e in state["evals"].items()}
    state["summary_eval"] = {k: {m: v for m, v in e.items() if "tool_retries" not in m}
                             for k, e in state["summary_eval"].items()}  # fmt: skip
    return state


def test_an_http_tool_rides_out_a_5xx_burst_then_stops_on_an_outage_and_resumes_to_a_healthy_runs_numbers(
    tmp_path: Path,
) -> None:
    """The demo's calculator as a service (8 episodes a step, 3 to 8 calls each step and eval): requests 1-3 are
    the eval before training, 4-7 step 1's rollout, where the 6th and 7th get a 503 (the burst, ridden out by the
    tool's retries); the port closes after request 18, inside step 3's rollout (16-23 with the two retries), after
    step 2's checkpoint. Healed, the same command completes, equal bit for bit (metrics, evals, checkpoints) to a
    run whose service never failed: no episode trained on a dead service's errors."""
    healthy = SwitchServer(after=10**9, then="down")
    try:
        assert _run(_calculator_service(healthy), tmp_path / "healthy").returncode == 0
    finally:
        healthy.close()
    server = SwitchServer(after=5, then="5xx", burst=2, down_after=18)
    try:
        says = "agent.tools' calculator entry: its service did not answer in a training step"
        rows = _stops_then_resumes(server, _calculator_service(server), tmp_path / "run", None, says)
    finally:
        server.close()
    retries = [r["agent/tool_retries"] for r in rows if "agent/tool_retries" in r]
    assert retries == [2, 0, 0, 0] == [server.refused, 0, 0, 0]
    assert sum(r["agent/tool_calls_mean"] for r in rows if "agent/tool_calls_mean" in r) > 0
    problems = compare_runs(tmp_path / "run", tmp_path / "healthy", _without_retries)
    assert not problems, problems
