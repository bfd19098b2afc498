"""The reference reward service for the `http` reward (run by `python -m rlexp.serve_reward`).

It speaks the protocol of rlexp.rewards.http_reward (POST {"items": [...]} -> {"rewards":
[...]}) and scores with any registered reward (`--reward math`, `format`, `arith_correct`)
or a user function (`--function module:function`, batch signature). To rehearse failures it
can inject faults into a share of requests (`--fault-rate 0.3 --faults timeout,5xx,nan`):
`timeout` answers only after `--fault-delay-s`, `5xx` answers 503, `nan` answers NaN for
every item. `--latency-s` makes every answer take that long, as a remote scorer's would (an LLM judge, a sandbox
farm across a network): benchmarks/bench_async.py uses it to time scoring off the trainer's path.
`--token-env NAME` requires `Authorization: Bearer $NAME`. GET /healthz answers ok.
"""

from __future__ import annotations

import json
import math
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("timeout", "5xx", "nan")


class RewardServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        score: Callable[..., list[float]],
        *,
        fault_rate: float = 0.0,
        faults: tuple[str, ...] = FAULTS,
        fault_delay_s: float = 5.0,
        latency_s: float = 0.0,
        seed: int = 0,
        token: str | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        unknown = set(faults) - set(FAULTS)
        if unknown or not faults:
            raise ValueError(f"faults must be a non-empty subset of {FAULTS}, got {faults}")
        self.score, self.fault_rate, self.faults, self.fault_delay_s = score, fault_rate, faults, fault_delay_s
        self.token, self.latency_s = token, latency_s
        self.stats: Counter = Counter()  # requests, items, and one count per injected fault
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client gave up (its timeout), which the timeout fault provokes on purpose
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def draw_fault(self) -> str | None:
        with self._lock:
            self.stats["requests"] += 1
            if self._rng.random() >= self.fault_rate:
                return None
            fault = self._rng.choice(self.faults)
            self.stats[fault] += 1
            return fault


class _Handler(BaseHTTPRequestHandler):
    server: RewardServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would drown the test output

    def _reply(self, code: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._reply(200, {"ok": True}) if self.path.rstrip("/") == "/healthz" else self._reply(404, {})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.server.token is not None and self.headers.get("Authorization") != f"Bearer {self.server.token}":
            self._reply(401, {"error": "missing or wrong bearer token"})
            return
        try:
            items = json.loads(raw)["items"]
            if not isinstance(items, list):
                raise TypeError("items must be a list")
        except (ValueError, KeyError, TypeError) as err:
            self._reply(400, {"error": f"expected {{'items': [...]}}: {err}"})
            return
        if self.server.latency_s:
            time.sleep(self.server.latency_s)
        fault = self.server.draw_fault()
        if fault == "5xx":
            self._reply(503, {"error": "injected fault"})
            return
        if fault == "timeout":
            time.sleep(self.server.fault_delay_s)
        self.server.stats["items"] += len(items)
        if fault == "nan":
            self._reply(200, {"rewards": [math.nan] * len(items)})
            return
        rewards = self.server.score(
            [i.get("prompt", "") for i in items],
            [i.get("completion", "") for i in items],
            answer=[i.get("answer") for i in items],
            id=[i.get("id") for i in items],
        )
        self._reply(200, {"rewards": [float(r) for r in rewards]})


def make_scorer(
    reward: str | None, function: str | None, kwargs: dict[str, Any] | None = None
) -> Callable[..., list[float]]:
    """A user function, or the registered reward built with `kwargs` (its own check refuses bad ones first)."""
    if function:
        from rlexp.rewards.python_reward import load_function

        return load_function(function)
    from rlexp.rewards.registry import check_kwargs, known_reward_fns, make_reward_fn

    name = reward or "math"
    if name in known_reward_fns():
        check_kwargs(name, kwargs, "reward.functions[].kwargs")
    return make_reward_fn(name, kwargs)


def start_server(
    reward: str | None = "math", function: str | None = None, host: str = "127.0.0.1", port: int = 0, **kw: Any
) -> RewardServer:
    """Serve in a background thread (port 0: any free port; see `.url`); stop with `.shutdown()`."""
    server = RewardServer((host, port), make_scorer(reward, function), **kw)
    threading.Thread(target=server.serve_forever, name="rlexp-reward-server", daemon=True).start()
    return server
