"""`reward=http` trains: the real `python -m rlexp.serve_reward` on loopback, the real `python -m rlexp`.

Training hands the reward numpy arrays (Tunix's batch fields), unlike the unit tests' lists; this
runs the whole path, once against a healthy service and once with 30 % of requests faulted
(timeouts, 503s, NaN answers), which must cost errored invocations, never the run.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_rlexp, start_rlexp

pytestmark = pytest.mark.slow

ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}
SMALL = [
    "trainer.max_steps=6",
    "trainer.eval_every=3",
    "trainer.checkpoint_every=3",
    "trainer.eval_prompts=16",
    "trainer.eval_samples=1",
    "logger=none",
]


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Iterator[str]:
    """Start `python -m rlexp.serve_reward` on a free loopback port (port 0; it prints its URL)."""
    extra = getattr(request, "param", [])
    cmd = ["--reward", "arith_correct", "--port", "0", *extra]
    proc = start_rlexp(
        *cmd, module="rlexp.serve_reward", env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline, line = time.monotonic() + 60, ""
        while not line and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 1.0)[0]:
                line = proc.stdout.readline()  # type: ignore[union-attr]
        m = re.search(r"at (http://127\.0\.0\.1:\d+/)", line)
        assert m, f"serve_reward did not start: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"  # type: ignore[union-attr]
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def train(url: str, run_dir: Path, *kwargs: str) -> tuple[dict, list[dict]]:
    cmd = ["reward=http", f"reward.functions.0.kwargs.url={url}", *kwargs, *SMALL, f"hydra.run.dir={run_dir}"]
    proc = run_rlexp(*cmd, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return summary, [r for r in records if "rewards/sum" in r]


def test_http_reward_trains(serve: str, tmp_path: Path) -> None:
    summary, steps = train(serve, tmp_path)
    assert summary["status"] == "completed" and summary["train"]["steps"] == 6
    assert [r["step"] for r in steps] == list(range(1, 7))
    for r in steps:
        assert r["rewards/error_ratio"] == 0.0 and r["rewards/remote/errors"] == 0.0
        assert r["rewards/remote/mean"] == pytest.approx(r["rewards/sum"]) == pytest.approx(r["score/mean"])
    assert any(r["rewards/remote/mean"] > 0 for r in steps)  # the service scored, and some answers were right
    assert summary["eval"]["before"]["greedy_accuracy"] > 0  # eval grades through the service too


FAULTS = ["--fault-rate", "0.3", "--faults", "timeout,5xx,nan", "--fault-delay-s", "1.0", "--seed", "3"]


@pytest.mark.parametrize("serve", [FAULTS], indirect=True)
def test_http_reward_trains_through_thirty_percent_faults(serve: str, tmp_path: Path) -> None:
    client = [
        f"reward.functions.0.kwargs.{k}" for k in ("timeout_s=0.5", "retries=3", "backoff_s=0.05", "batch_size=4")
    ]
    summary, steps = train(serve, tmp_path, *client)
    assert summary["status"] == "completed" and summary["train"]["steps"] == 6
    assert [r["step"] for r in steps] == list(range(1, 7))
    errored = sum(r["rewards/remote/errors"] for r in steps)  # non_finite is a breakdown of errors
    ratios = [round(r["rewards/error_ratio"], 3) for r in steps]
    print(f"\nhttp training with 30 % faults: {errored:.0f} errored invocations, error ratio per step {ratios}")
    assert errored > 0  # NaN answers arrived and were counted, not trained on
    assert all(r["rewards/error_ratio"] < 0.8 for r in steps)  # within the error budget
    assert all("rewards/remote/mean" in r and "score/mean" in r for r in steps)
