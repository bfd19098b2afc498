"""The http reward against the reference server on loopback: retries, faults, auth, and the error budget."""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.request

import numpy as np
import pytest

from rlexp.config.schema import RewardConfig, RewardFnConfig
from rlexp.errors import ConfigError
from rlexp.rewards.compose import RewardErrorBudgetExceeded, build_rewards
from rlexp.rewards.http_reward import json_value
from rlexp.rewards.server import start_server
from tests.helpers import start_rlexp

N = 1000


def _http_set(url: str, max_error_ratio: float = 0.8, **kw: object) -> object:
    kwargs = {"url": url, "timeout_s": 0.25, "retries": 3, "backoff_s": 0.02, "max_concurrency": 16, "batch_size": 1}
    fn = RewardFnConfig(fn="http", name="remote", kwargs={**kwargs, **kw})
    return build_rewards(RewardConfig(name="h", functions=[fn], max_error_ratio=max_error_ratio))


def _batch(n: int) -> tuple[list[str], list[str], dict[str, list]]:
    completions = [str(i % 7) for i in range(n)]
    return ["p"] * n, completions, {"answer": [str(i % 5) for i in range(n)], "id": [f"r{i}" for i in range(n)]}


@pytest.mark.slow
def test_thousand_calls_with_thirty_percent_faults() -> None:
    server = start_server("arith_correct", fault_rate=0.3, fault_delay_s=1.0, seed=1)
    rs = _http_set(server.url)
    try:
        prompts, completions, fields = _batch(N)
        t0 = time.monotonic()
        out = rs.fns[0](prompts, completions, **fields)
        wall = time.monotonic() - t0
        counters = rs.rewards[0].raw.counters
        m = rs.step_metrics()
    finally:
        rs.close()
        server.shutdown()
    injected = {k: server.stats[k] for k in ("timeout", "5xx", "nan")}
    expected = [1.0 if int(c) == int(a) else 0.0 for c, a in zip(completions, fields["answer"], strict=True)]
    right = sum(o == e for o, e in zip(out, expected, strict=True))
    print(f"\nhttp fault test: {N} calls, {server.stats['requests']} requests, injected {injected}, "
          f"client retries {counters['retries']}, failed batches {counters['failed_batches']}, "
          f"error ratio {m['rewards/error_ratio']:.3f}, correct scores {right}/{N}, wall {wall:.1f}s")  # fmt: skip
    assert wall < 60  # nothing hangs: timeouts are bounded by timeout_s x attempts
    assert all(math.isfinite(v) for v in out)  # errored calls score 0, never NaN
    assert 0.2 < sum(injected.values()) / server.stats["requests"] < 0.4
    assert counters["retries"] >= injected["timeout"] + injected["5xx"] - 10  # every retryable fault retried
    # NaN answers are not retried (the service answered); they, and the rare batch that failed 4 times, are errors.
    errors = m["rewards/remote/non_finite"]
    assert errors == pytest.approx(injected["nan"] + counters["failed_batches"], abs=2)
    assert m["rewards/error_ratio"] == errors / N and 0.05 < m["rewards/error_ratio"] < 0.2
    assert right >= N - errors  # every call that did not error scored exactly what the server computed


def test_error_budget_aborts_when_most_calls_fail() -> None:
    server = start_server("arith_correct", fault_rate=0.9, faults=("nan",), seed=2)
    rs = _http_set(server.url)
    try:
        rs.fns[0](*_batch(200)[:2], **_batch(200)[2])
        with pytest.raises(RewardErrorBudgetExceeded, match=r"reward.max_error_ratio=0.8: 9\d% of the step"):
            rs.step_metrics()
    finally:
        rs.close()
        server.shutdown()


def test_auth_header_from_env_and_4xx_is_not_retried(monkeypatch) -> None:  # noqa: ANN001
    server = start_server("arith_correct", token="s3cret")
    try:
        monkeypatch.setenv("RLEXP_TEST_REWARD_TOKEN", "s3cret")
        good = _http_set(server.url, auth_env="RLEXP_TEST_REWARD_TOKEN", batch_size=4)
        assert good.fns[0](["p"] * 3, ["1", "2", "3"], answer=["1", "0", "3"]) == [1.0, 0.0, 1.0]
        good.close()
        monkeypatch.setenv("RLEXP_TEST_REWARD_TOKEN", "wrong")
        bad = _http_set(server.url, auth_env="RLEXP_TEST_REWARD_TOKEN")
        before = server.stats["requests"]
        assert bad.fns[0](["p"], ["1"], answer=["1"]) == [0.0]
        assert bad.rewards[0].raw.counters == {"requests": 1, "retries": 0, "failed_batches": 1, "invalid_responses": 0}
        assert server.stats["requests"] == before  # rejected before scoring
        bad.close()
        monkeypatch.delenv("RLEXP_TEST_REWARD_TOKEN")
        with pytest.raises(ConfigError, match="set this environment variable"):
            _http_set(server.url, auth_env="RLEXP_TEST_REWARD_TOKEN")
    finally:
        server.shutdown()


def test_unreachable_service_fails_fast_and_scores_errors() -> None:
    rs = _http_set("http://127.0.0.1:9/", max_error_ratio=1.0, retries=1)  # port 9 (discard): refused
    t0 = time.monotonic()
    assert rs.fns[0](["p"] * 4, ["1"] * 4, answer=["1"] * 4) == [0.0] * 4
    assert time.monotonic() - t0 < 5
    assert rs.step_metrics()["rewards/error_ratio"] == 1.0
    assert rs.rewards[0].raw.counters["failed_batches"] == 4
    rs.close()


def test_reference_server_protocol_and_health() -> None:
    server = start_server("math")
    try:
        body = json.dumps({"items": [{"prompt": "p", "completion": "\\boxed{1/2}", "answer": "0.5", "id": "a"}]})
        req = urllib.request.Request(server.url, body.encode(), {"Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=10) as resp:
            assert json.loads(resp.read()) == {"rewards": [1.0]}
        with opener.open(server.url + "healthz", timeout=10) as resp:
            assert json.loads(resp.read()) == {"ok": True}
    finally:
        server.shutdown()


def test_serve_reward_latency_s_answers_every_request_that_late() -> None:
    """`python -m rlexp.serve_reward --latency-s`, as benchmarks/bench_async.py's remote scorer uses it."""
    proc = start_rlexp("--reward", "arith_correct", "--port", "0", "--latency-s", "0.4", module="rlexp.serve_reward",
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        url = proc.stdout.readline().split(" at ")[-1].strip()
        body = json.dumps({"items": [{"prompt": "p", "completion": "3", "answer": "3", "id": "a"}] * 2}).encode()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for _ in range(2):
            t0 = time.monotonic()
            with opener.open(urllib.request.Request(url, body, {"Content-Type": "application/json"}), timeout=10) as r:
                assert json.loads(r.read()) == {"rewards": [1.0, 1.0]}
            assert 0.4 <= time.monotonic() - t0 < 5
        t0 = time.monotonic()
        with opener.open(url + "healthz", timeout=10):  # the latency is the scorer's, not the health check's
            assert time.monotonic() - t0 < 0.4
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_numpy_batch_fields_as_training_passes_them() -> None:
    # Tunix hands every batch field over as a numpy array, repeated per generation.
    server = start_server("arith_correct")
    rs = _http_set(server.url, batch_size=2)
    try:
        fields = {"answer": np.array(["1", "0", "3"]), "id": np.array(["a", "a", "b"]), "trajectory_ids": ["0_0"] * 3}
        out = rs.fns[0](np.array(["p"] * 3), ["1", "2", "3"], mode="train", **fields)
        assert out == [1.0, 0.0, 1.0]
        assert rs.step_metrics()["rewards/error_ratio"] == 0.0
        assert rs.rewards[0].raw.counters["invalid_responses"] == 0
    finally:
        rs.close()
        server.shutdown()


def test_json_value_turns_array_likes_into_plain_values() -> None:
    value = json_value({"a": np.array([[1, 2]]), "b": (np.float32(0.5), np.str_("x")), 3: np.bool_(True)})
    assert value == {"a": [[1, 2]], "b": [0.5, "x"], "3": True}
    assert json.dumps(value) == '{"a": [[1, 2]], "b": [0.5, "x"], "3": true}'
    assert type(value["b"][0]) is float and json_value(None) is None


@pytest.mark.parametrize(("status", "after", "waits"), [(429, "1", True), (503, "1", True), (429, "120", False)])
def test_retry_after_is_honoured_within_the_budget(status: int, after: str, waits: bool) -> None:
    """A 429 or 503 with Retry-After is waited out (1 s, not the 20 ms backoff) and the batch then scores; one
    asking for more than max_retry_after_s errors the batch at once, and `errors` counts it."""
    from tests.rewards.judge_servers import FaultServer

    server = FaultServer()
    server.busy, server.busy_status, server.retry_after = 2, status, after
    rs = _http_set(server.url("busy").replace("/v1", "/http"), max_error_ratio=1.0, batch_size=2,
                   max_retry_after_s=5.0)  # fmt: skip
    try:
        t0 = time.monotonic()
        out = rs.fns[0](["p"] * 4, ["1"] * 4, answer=["1"] * 4)
        took = time.monotonic() - t0
        m = rs.step_metrics()
    finally:
        rs.close()
        server.shutdown()
    if waits:
        assert out == [1.0] * 4 and took >= 0.9 and m["rewards/remote/errors"] == 0
        assert rs.rewards[0].raw.counters["retries"] == 2
    else:
        assert took < 5.0 and m["rewards/remote/errors"] == 4  # both batches refused, neither retried
        assert "Retry-After 120 s, beyond max_retry_after_s=5" in rs.stats.last_error["remote"]


def test_a_negative_max_retry_after_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_retry_after_s"):
        _http_set("http://127.0.0.1:9/", max_retry_after_s=-1.0)
