"""`reward=judge`: an LLM judge over a real OpenAI-compatible server on loopback, its faults, metrics and cost.

The judge itself is never mocked: the slow tests run `transformers serve` on a rigged tiny checkpoint
(tests/rewards/judge_servers.py) whose greedy answer is always "Score: 1"; the fault tests run a stdlib
server answering the ways endpoints fail (slow, non-JSON, no choices, an unparsable answer) and a port
nothing listens on.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rlexp.config.schema import RewardConfig, RewardFnConfig
from rlexp.estimates.cost import actual_cost, estimate_cost, format_cost
from rlexp.rewards.compose import build_rewards
from rlexp.rewards.judge import _to_score
from rlexp.train.metrics import group_stats
from tests.faults import SMALL_BATCH
from tests.helpers import compose_conf, run_rlexp
from tests.rewards.judge_servers import FaultServer, TransformersServe, free_port, rigged_checkpoint

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-do-not-leak-4f1c"
TEMPLATE = "Grade {response} for {prompt} (answer {references.answer})."


def _judge_set(base_url: str, **kw: object):  # noqa: ANN202
    kwargs = {"base_url": base_url, "model": "judge", "prompt_template": TEMPLATE, "timeout_s": 0.5, "retries": 1,
              "backoff_s": 0.01, "max_concurrency": 4, **kw}  # fmt: skip
    return build_rewards(
        RewardConfig(name="j", functions=[RewardFnConfig(fn="judge", kwargs=kwargs)], max_error_ratio=1.0)
    )


def _score(rs, n: int = 4) -> tuple[list[float], dict[str, float]]:  # noqa: ANN001
    try:
        out = rs.fns[0](["1+1="] * n, ["2"] * n, answer=np.array(["2"] * n), id=np.array([str(i) for i in range(n)]))
        return out, rs.step_metrics()
    finally:
        rs.close()


@pytest.fixture(scope="module")
def faults():  # noqa: ANN201
    server = FaultServer(slow_s=2.0)
    yield server
    server.shutdown()


def test_last_match_wins_tokens_and_latency_are_metrics(faults) -> None:  # noqa: ANN001
    out, m = _score(_judge_set(faults.url("ok"), samples=3))
    assert out == [0.5] * 4  # "Score: 0.2 ... Score: 0.5": the last match
    assert m["rewards/judge/judge_calls"] == 12 and m["rewards/judge/judge_tokens"] == 12 * 13
    assert m["rewards/judge/rpc_error_ratio"] == 0.0 and m["rewards/judge/invalid_ratio"] == 0.0
    assert 0 < m["rewards/judge/latency_mean_s"] <= m["rewards/judge/latency_p95_s"] < 0.5
    sent = faults.requests[-1]["body"]
    assert sent["model"] == "judge" and sent["messages"][-1]["content"] == "Grade 2 for 1+1= (answer 2)."


@pytest.mark.parametrize(
    ("mode", "rpc", "invalid"),
    [("down", 1.0, 0.0), ("slow", 1.0, 0.0), ("garbage", 0.0, 1.0), ("nochoices", 0.0, 1.0), ("unparsable", 0.0, 1.0)],
)
def test_faults_are_counted_never_crash(faults, mode: str, rpc: float, invalid: float) -> None:  # noqa: ANN001
    url = f"http://127.0.0.1:{free_port()}/v1" if mode == "down" else faults.url(mode)
    rs = _judge_set(url, timeout_s=0.3)
    out, m = _score(rs)
    assert out == [0.0] * 4  # errored invocations score 0
    assert m["rewards/judge/rpc_error_ratio"] == rpc and m["rewards/judge/invalid_ratio"] == invalid
    assert m["rewards/error_ratio"] == 1.0 and m["rewards/judge/non_finite"] == 4
    assert m["rewards/judge/latency_p95_s"] < 3.0  # a slow judge is cut at timeout_s x attempts
    if mode in ("down", "slow"):
        assert m["rewards/judge/judge_retries"] == 4  # retries=1 per call


@pytest.mark.parametrize("mode", ["huge", "billion"])
def test_a_score_out_of_range_is_an_invalid_response_unless_clipping_is_declared(faults, mode: str) -> None:  # noqa: ANN001
    """Scores "1e9" and "1000000000" are no top scores: invalid, counted, errored (the sample leaves its
    group); `clip: true` declares the clipping and scores them 1."""
    out, m = _score(_judge_set(faults.url(mode)))
    assert out == [0.0] * 4  # errored: the group's mean of no valid value
    assert m["rewards/judge/invalid"] == 4 and m["rewards/judge/invalid_ratio"] == 1.0
    assert m["rewards/judge/errors"] == 4 and m["rewards/error_ratio"] == 1.0
    rs = _judge_set(faults.url(mode))
    _score(rs)
    assert "is not a finite number in [-1, 1]" in rs.stats.last_error["judge"]
    clipped, m = _score(_judge_set(faults.url(mode), clip=True))
    assert clipped == [1.0] * 4 and m["rewards/judge/invalid"] == 0 and m["rewards/judge/errors"] == 0


@pytest.mark.parametrize(("status", "header"), [(429, "1"), (503, "HTTP-DATE")])
def test_busy_judge_is_waited_for_as_retry_after_says(faults, status: int, header: str) -> None:  # noqa: ANN001
    """429 and 503 with Retry-After (seconds or an HTTP date) wait that long, not the 10 ms backoff; the calls
    then score."""
    import email.utils
    import time

    faults.busy, faults.busy_status = 4, status  # every first attempt of the 4 calls is refused
    faults.retry_after = email.utils.formatdate(time.time() + 2, usegmt=True) if header == "HTTP-DATE" else header
    t0 = time.monotonic()
    out, m = _score(_judge_set(faults.url("busy"), retries=2, max_concurrency=4))
    assert out == [1.0] * 4 and m["rewards/judge/rpc_error_ratio"] == 0.0 and m["rewards/judge/judge_retries"] == 4
    assert time.monotonic() - t0 >= 0.9  # the server's second, not the backoff's 10 ms


def test_a_retry_after_beyond_the_budget_is_an_error_at_once(faults) -> None:  # noqa: ANN001
    import time

    faults.busy, faults.busy_status, faults.retry_after = 4, 429, "120"
    rs = _judge_set(faults.url("busy"), retries=3, max_retry_after_s=5.0)
    t0 = time.monotonic()
    out, m = _score(rs)
    faults.busy = 0
    assert time.monotonic() - t0 < 5.0 and m["rewards/judge/rpc_error_ratio"] == 1.0
    assert (
        m["rewards/judge/errors"] == 4
        and "Retry-After 120 s, beyond max_retry_after_s=5" in rs.stats.last_error["judge"]
    )


def test_api_key_is_sent_never_kept(faults, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("RLEXP_TEST_JUDGE_KEY", SECRET)
    rs = _judge_set(faults.url("unparsable"), api_key_env="RLEXP_TEST_JUDGE_KEY")
    fn = rs.rewards[0].raw
    out, m = _score(rs)
    assert faults.requests[-1]["auth"] == f"Bearer {SECRET}"
    kept = json.dumps([m, rs.stats.last_error, fn.last_error, vars(fn) if hasattr(fn, "__dict__") else {}], default=str)
    assert SECRET not in kept


@pytest.mark.parametrize(
    ("text", "scorer", "extra", "want"),
    [
        ("Score: 0.7", "number", {}, 0.7),
        ("Score: 7 ... final Score: 9", "number", {"rng": [1, 10]}, 8 / 9),
        ("Score: 3", "number", {"clip": True}, 1.0),  # clipping declared
        ("Score: -4", "number", {"clip": True}, -1.0),
        ("Score: 3", "number", {}, None),  # outside [-1, 1]: invalid, never a top score
        ("Score: 1e9", "number", {}, None),  # the whole number, not the "1" a regex stopped at
        ("Score: 1000000000", "number", {"rng": [1, 10]}, None),
        ("Score: 1000000000", "number", {"rng": [1, 10], "clip": True}, 1.0),
        ("Score: 0.5e1", "number", {"rng": [0, 10]}, 0.5),
        ("Score: inf", "number", {"clip": True}, None),
        ("no verdict", "number", {}, None),
        ("Verdict: CORRECT", "exact_match", {"match": "correct"}, 1.0),
        ("Verdict: wrong", "exact_match", {"match": "correct"}, -0.5),
    ],
)
def test_parse_and_score(text: str, scorer: str, extra: dict, want: float | None) -> None:
    import re

    rx = re.compile(r"(?:Score|Verdict):\s*(\S+)")
    got = _to_score(text, rx, scorer, extra.get("match"), extra.get("rng"), 1.0, -0.5, extra.get("clip", False))
    assert got == (None if want is None else pytest.approx(want))


def _rlexp(args: list[str], run: Path, module: str = "rlexp", env: dict | None = None) -> subprocess.CompletedProcess:
    return run_rlexp(*args, f"hydra.run.dir={run}", module=module, env={**os.environ, **(env or {})})


J = "reward.functions.0.kwargs"


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ([], "rlexp: error: reward.functions[0].kwargs.model=None: name the judge model"),
        ([f"{J}.model=m", f"{J}.prompt_template='rate {{response}} by {{rubric}}'"],
         "rlexp: error: reward.functions[0].kwargs.prompt_template='{rubric}': unknown placeholder"),
        ([f"{J}.model=m", f"{J}.samples=0"], "rlexp: error: reward.functions[0].kwargs.samples=0: use an integer in [1, 32]"),
        ([f"{J}.model=m", f"{J}.clip=sometimes"], "rlexp: error: reward.functions[0].kwargs.clip='sometimes': use true"),
        ([f"{J}.model=m", f"{J}.max_retry_after_s=-1"],
         "rlexp: error: reward.functions[0].kwargs.max_retry_after_s=-1: use a number in [0.0, inf)"),
        ([f"{J}.model=m", f"{J}.samples=33"], "kwargs.samples=33: use an integer in [1, 32]"),
        ([f"{J}.model=m", f"{J}.timeout_s=0"], "kwargs.timeout_s=0: use a number in (0.0, inf)"),
        ([f"{J}.model=m", f"{J}.api_key_env=RLEXP_UNSET_JUDGE_KEY"], "kwargs.api_key_env='RLEXP_UNSET_JUDGE_KEY': export"),
    ],
)  # fmt: skip
def test_bad_judge_configs_are_one_line_and_write_nothing(
    tmp_path: Path, overrides: list[str], line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`rlexp reward=judge ...` in-process (the command as a process: the unreachable-judge test below)."""
    from tests.launch.conftest import run_cli

    run = tmp_path / "run"
    code = run_cli(monkeypatch, "reward=judge", *overrides, f"hydra.run.dir={run}")
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert line in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not run.exists() or not any(run.iterdir())  # Hydra makes the folder; nothing is written in it


def test_weighted_mean_and_its_alias_agree() -> None:
    fns = [RewardFnConfig(fn="arith_correct", weight=3.0), RewardFnConfig(fn="arith_format", weight=1.0)]
    got = {}
    for combine in ("weighted_mean", "weighted_mean_clipped"):
        rs = build_rewards(RewardConfig(name="c", functions=fns, combine=combine))
        got[combine] = rs.fns[0](["1+1="] * 3, ["2", " 3", "x"], answer=["2", "2", "2"])
        m = rs.step_metrics()
        assert m["rewards/arith_correct/latency_p95_s"] >= 0 and m["rewards/arith_format/invalid_ratio"] == 0
        assert rs.fns[0].__name__ == combine
    assert (
        got["weighted_mean"] == got["weighted_mean_clipped"] == pytest.approx([1.0, 0.25, 0.0])
    )  # " 3": wrong, digits only


def test_learnable_prompt_ratio_is_the_complement_of_zero_std() -> None:
    s = group_stats(np.array([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.2, 0.3]), 2)
    assert s["frac_reward_zero_std"] == 0.5 and s["learnable_prompt_ratio"] == 0.5


def test_judge_tokens_are_estimated_and_priced() -> None:
    over = [
        "reward=judge",
        f"{J}.model=m",
        f"{J}.price_per_million_tokens=2.0",
        f"{J}.samples=2",
        "trainer.max_steps=10",
    ]
    cfg = compose_conf(over)
    est = estimate_cost(cfg)
    t = cfg.trainer
    per_call_min = t.max_prompt_tokens + t.max_completion_tokens + 256  # quoted prompt + response + max_tokens
    assert est["judge_tokens"] >= per_call_min * 2 * t.batch_size * t.num_generations * 10
    assert est["judge_cost_usd"] == pytest.approx(est["judge_tokens"] * 2.0 / 1e6, abs=1e-4)
    assert "judge:" in format_cost(est)
    act = actual_cost(cfg, 10.0, {"judge": 500_000})
    assert act["judge_tokens"] == 500_000 and act["judge_cost_usd"] == 1.0 and act["cost_usd"] == 1.0
    unpriced = estimate_cost(compose_conf(["reward=judge", f"{J}.model=m"]))
    assert unpriced["judge_cost_usd"] is None and "unpriced" in format_cost(unpriced)
    assert "judge_tokens" not in estimate_cost(compose_conf([]))  # no judge, no judge keys


# ---- a real judge: transformers serve on loopback ---------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):  # noqa: ANN001, ANN201
    work = tmp_path_factory.mktemp("judge_serve")
    server = TransformersServe(rigged_checkpoint(work / "ckpt", "Score: 1"), work)
    try:
        yield server.wait()
    finally:
        server.stop()


@pytest.mark.slow
def test_transformers_serve_judge_scores_and_counts_tokens(served) -> None:  # noqa: ANN001
    out, m = _score(_judge_set(served.base_url, model=served.model, timeout_s=60.0, samples=2, max_tokens=16))
    assert out == [1.0] * 4
    assert m["rewards/judge/judge_calls"] == 8 and m["rewards/judge/judge_completion_tokens"] >= 8 * 8
    assert (
        m["rewards/judge/judge_prompt_tokens"] > 8 * len("Grade 2 for 1+1= (answer 2).")
        and m["rewards/judge/rpc_error_ratio"] == 0
    )
    exact = _judge_set(served.base_url, model=served.model, timeout_s=60.0, max_tokens=16, scorer="exact_match",
                       answer_regex=r"Score: (\d)", match="0", correct_value=1.0, wrong_value=-1.0)  # fmt: skip
    assert _score(exact, 2)[0] == [-1.0, -1.0]


# 8 judge calls a step, the shapes of tests/faults.py's judge workload (one compile for the suite's judge runs)
TINY_RUN = ["trainer.max_steps=2", "trainer.eval_every=2", "trainer.checkpoint_every=2", *SMALL_BATCH,
            "trainer.eval_samples=1", "logger=none"]  # fmt: skip


@pytest.mark.slow
def test_training_against_the_judge_logs_its_metrics_and_keeps_no_key(served, tmp_path: Path) -> None:  # noqa: ANN001
    run = tmp_path / "run"
    over = ["reward=judge", f"{J}.base_url={served.base_url}", f"{J}.model={served.model}", f"{J}.max_tokens=16",
            f"{J}.api_key_env=RLEXP_TEST_JUDGE_KEY", f"{J}.price_per_million_tokens=1.0", *TINY_RUN]  # fmt: skip
    proc = _rlexp(over, run, env={"RLEXP_TEST_JUDGE_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = [r for r in rows if "rewards/judge/mean" in r]
    assert len(train) == 2
    for r in train:
        assert r["rewards/judge/mean"] == 1.0 and r["rewards/judge/judge_tokens"] > 0
        assert r["rewards/judge/rpc_error_ratio"] == 0 and r["rewards/judge/invalid_ratio"] == 0
        assert r["rewards/judge/latency_p95_s"] >= r["rewards/judge/latency_mean_s"] > 0
        assert r["learnable_prompt_ratio"] == 0.0  # every completion scores 1: nothing to learn
    summary = json.loads((run / "summary.json").read_text())
    tokens = sum(r["rewards/judge/judge_tokens"] for r in train)
    assert summary["cost"]["actual"]["judge_tokens"] >= tokens > 0
    assert summary["cost"]["actual"]["judge_cost_usd"] == pytest.approx(
        summary["cost"]["actual"]["judge_tokens"] / 1e6, abs=1e-4
    )
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_arith_judge_composite_logs_both_rewards_and_the_combined_one(served, tmp_path: Path) -> None:  # noqa: ANN001
    run = tmp_path / "run"
    k = "reward.functions.1.kwargs"
    proc = _rlexp(
        ["reward=arith_judge", f"{k}.base_url={served.base_url}", f"{k}.model={served.model}", *TINY_RUN], run
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = [r for r in rows if "rewards/judge/mean" in r]
    assert len(train) == 2
    for r in train:
        assert r["rewards/judge/mean"] == 1.0 and 0.0 <= r["rewards/correct/mean"] <= 1.0
        combined = 0.7 * r["rewards/correct/mean"] + 0.3 * r["rewards/judge/mean"]
        assert r["rewards/weighted_mean/mean"] == pytest.approx(combined, abs=1e-5)


def _completions(tmp_path: Path) -> Path:
    path = tmp_path / "completions.jsonl"
    rows = [{"id": f"q{i // 2}", "prompt": f"{i}+1=", "answer": str(i + 1), "completion": str(i + 1)} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_preflight_dry_runs_the_judge(served, tmp_path: Path) -> None:  # noqa: ANN001
    given = f"validate.completions={_completions(tmp_path)}"
    ok = _rlexp(["reward=judge", f"{J}.base_url={served.base_url}", f"{J}.model={served.model}", given],
                tmp_path / "ok", module="rlexp.validate")  # fmt: skip
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert "rlexp: preflight passed" in ok.stdout
    table = [line for line in ok.stdout.splitlines() if line.startswith("rlexp:   ")]
    assert table[0].split()[1:4] == ["reward", "weight", "n"] and table[1].split()[1] == "judge"
    result = json.loads((tmp_path / "ok" / "validation.json").read_text())
    assert result["rewards"]["judge"]["mean"] == 1.0 and result["rewards"]["judge"]["judge_tokens"] > 0


def test_preflight_refuses_an_unreachable_judge(tmp_path: Path) -> None:
    given = f"validate.completions={_completions(tmp_path)}"
    down = f"http://127.0.0.1:{free_port()}/v1"
    bad = _rlexp(["reward=judge", f"{J}.base_url={down}", f"{J}.model=m", f"{J}.retries=0", given],
                 tmp_path / "down", module="rlexp.validate")  # fmt: skip
    assert bad.returncode == 1
    assert "preflight failed: reward:judge: 6 errors" in bad.stdout and "ConnectError" in bad.stdout


@pytest.mark.slow
def test_training_against_an_unreachable_judge_stops_before_any_weights(tmp_path: Path) -> None:
    """`rlexp reward=judge` with nothing at base_url: one line, exit 1, before the models load; no checkpoint."""
    down = f"http://127.0.0.1:{free_port()}/v1"
    run = tmp_path / "run"
    out = _rlexp(["reward=judge", f"{J}.base_url={down}", f"{J}.model=m", "trainer.max_steps=1", "logger=none"], run)
    assert out.returncode == 1, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        f"rlexp: error: reward.functions[0].kwargs.base_url={down}: the judge does not answer (ConnectError); "
        "start its server or fix the URL (rlexp validate dry-runs it)"
    ]
    assert not (run / "checkpoints").exists() and not (run / "summary.json").exists()


@pytest.mark.slow
def test_a_judge_answering_1e9_trains_on_errors_never_top_scores_and_the_evals_count_apart(
    faults,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """`rlexp reward=judge` against a judge answering "Score: 1e9": every value is an invalid response (counted,
    null in samples.jsonl with its text), never 1; the evals' judge calls go to eval keys, not the step's; the
    cost estimate counts them and the actual tokens match the endpoint's usage exactly."""
    import yaml

    run = tmp_path / "run"
    over = ["reward=judge", f"{J}.base_url={faults.url('huge')}", f"{J}.model=m", "reward.max_error_ratio=1.0",
            "trainer.max_steps=2", "trainer.eval_every=1", "trainer.checkpoint_every=2", *SMALL_BATCH,
            "trainer.eval_samples=1", "logger=none"]  # fmt: skip
    proc = _rlexp(over, run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = yaml.safe_load((run / "config.yaml").read_text())["trainer"]
    per_step, per_eval = t["batch_size"] * t["num_generations"], 4 * (t["eval_passes"] + 1)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = [r for r in rows if "rewards/judge/judge_calls" in r]
    assert len(train) == 2
    for r in train:  # the step's own calls: the eval at step 1 is not added in
        assert r["rewards/judge/judge_calls"] == per_step == r["rewards/judge/invalid"] == r["rewards/judge/errors"]
        assert r["rewards/judge/mean"] == 0.0  # errored samples leave their groups: never the top score 1
    evals = [r for r in rows if "eval/rewards/judge/judge_calls" in r]
    assert [r["eval/rewards/judge/judge_calls"] for r in evals] == [per_eval] * 3  # before, step 1, after
    assert all(r["eval/rewards/judge/invalid"] == per_eval and r["eval/pass_at_1"] == 0.0 for r in evals)
    samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["reward"] is None and s["rewards"] == {"judge": None} for s in samples)
    assert "score 1e9 is not a finite number in [-1, 1]" in samples[0]["errors"]["judge"]
    cost = json.loads((run / "summary.json").read_text())["cost"]
    assert cost["estimate"]["judge_eval_calls"] == 3 * per_eval
    assert cost["actual"]["judge_tokens"] == 13 * (2 * per_step + 3 * per_eval)  # the server's usage: 13 a call


def test_the_default_regex_reads_the_whole_number() -> None:
    """The default answer_regex stops at "1" of "1e9": the score is still the whole number, so invalid."""
    import re

    from rlexp.rewards.judge import DEFAULT_REGEX

    rx = re.compile(DEFAULT_REGEX)
    assert _to_score("Score: 1e9", rx, "number", None, None, 1.0, 0.0) is None
    assert _to_score("Score: 1e9", rx, "number", None, None, 1.0, 0.0, clip=True) == 1.0
    assert _to_score("Score: 0.5.", rx, "number", None, None, 1.0, 0.0) == 0.5
