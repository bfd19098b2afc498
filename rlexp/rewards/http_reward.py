"""`http`: score completions with a remote reward service.

Protocol (served by `python -m rlexp.serve_reward` for local testing):
    POST <url>   {"items": [{"prompt", "completion", "answer", "id"}, ...]}
    200          {"rewards": [float | null, ...]}   one value per item, in order

Completions go in batches of `batch_size`, at most `max_concurrency` requests at a time.
A timeout, a connection error, a 429 or a 5xx is retried `retries` times with exponential
backoff (`backoff_s`, doubling, capped at `max_backoff_s`); a 429 or 503 with a `Retry-After` header (seconds or
an HTTP date) waits that long instead when it is longer, and one asking for more than `max_retry_after_s` ends the
retries at once (`next_wait`, shared with the judge); what still fails, a 4xx, or a
malformed answer scores NaN for each item of the batch, which the reward set counts as an
errored invocation. The auth header's value is read from the environment variable named by
`auth_env` at call time and is never stored in configs or logs. Training hands the batch fields
over as numpy arrays (Tunix repeats every leaf per generation); `json_value` turns them, and
any other array-like, into plain JSON values before anything else looks at them.
"""

from __future__ import annotations

import datetime
import email.utils
import http.client
import json
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from rlexp.errors import ConfigError, RunError
from rlexp.rewards.registry import RewardFn, register

_RETRYABLE = {429, 500, 502, 503, 504}
RETRY_AFTER = {429, 503}  # the statuses whose Retry-After header is honoured (RFC 9110 15.5.20, 15.6.4)
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class _Counters:
    """The run's totals (`values`) and, for the step's metrics, what changed since the last `drain`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values = {"requests": 0, "retries": 0, "failed_batches": 0, "invalid_responses": 0}
        self._drained = dict(self.values)

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.values[key] += n

    def drain(self) -> dict[str, float]:
        """rewards/<name>/requests, retries, failed_batches, invalid_responses of the step: a service that was
        ridden out through retries says so in the step's metrics."""
        with self._lock:
            out = {k: float(v - self._drained[k]) for k, v in self.values.items()}
            self._drained = dict(self.values)
        return out


def _floats(payload: Any, n: int) -> list[float] | None:
    rewards = payload.get("rewards") if isinstance(payload, dict) else payload
    if not isinstance(rewards, list) or len(rewards) != n:
        return None
    out = []
    for v in rewards:
        if isinstance(v, bool) or not isinstance(v, int | float | None):
            return None
        out.append(math.nan if v is None else float(v))
    return out


def json_value(value: Any) -> Any:
    """A plain JSON value: numpy arrays and scalars (`.tolist()`), tuples and mappings converted recursively."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # np.ndarray, np.generic (np.str_ is a str and stops above)
        return json_value(tolist())
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return str(value)


def _column(value: Any, n: int) -> list[Any]:
    """One value per completion: None for an absent field, a batch column (list or array) as a list."""
    if value is None:
        return [None] * n
    values = json_value(value)
    if not isinstance(values, list) or len(values) != n:
        raise ValueError(f"expected {n} values, one per completion, got {values!r:.200}")
    return values


def retry_after_s(value: str | None) -> float | None:
    """Seconds a `Retry-After` header asks to wait (delay-seconds or an HTTP date), or None when absent or
    unreadable (the backoff then applies)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


def next_wait(status: int, header: str | None, backoff: float, limit: float) -> tuple[float | None, str]:
    """(seconds to wait before retrying, reason) after a retryable status: the backoff, or longer where a 429 or a
    503 says `Retry-After`; None when the server asks for more than `limit` seconds (max_retry_after_s): beyond
    the retry budget, the call is an error."""
    asked = retry_after_s(header) if status in RETRY_AFTER else None
    if asked is None:
        return backoff, f"HTTP {status}"
    if asked > limit:
        return None, f"HTTP {status} with Retry-After {asked:g} s, beyond max_retry_after_s={limit:g}"
    return max(backoff, asked), f"HTTP {status} (Retry-After {asked:g} s)"


def opener_for(url: str) -> urllib.request.OpenerDirector:
    """urllib's opener for `url`: a loopback service is reached directly, never through an HTTP(S)_PROXY."""
    handlers = [urllib.request.ProxyHandler({})] if urlparse(url).hostname in _LOOPBACK else []
    return urllib.request.build_opener(*handlers)


@dataclass(frozen=True)
class Retries:
    """How a POST is tried (`post_json`): each attempt's timeout, the retries and their backoff's bounds."""

    timeout_s: float
    retries: int
    backoff_s: float
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0


class PostFailed(Exception):
    """A POST that failed after `attempts` tries: `reason`; `transient` unless the service refused the request
    itself (a 4xx other than 429), which no retry or later resume would change."""

    def __init__(self, reason: str, attempts: int, transient: bool) -> None:
        super().__init__(reason)
        self.reason, self.attempts, self.transient = reason, attempts, transient


def post_json(
    opener: urllib.request.OpenerDirector,
    url: str,
    payload: Any,
    headers: dict[str, str],
    how: Retries,
    count: Callable[[str], None] = lambda key: None,
) -> bytes:
    """The body answering a POST of `payload` (JSON) to `url`. A timeout, a connection error, a 429 or a 5xx
    is retried `how.retries` times with exponential backoff (`next_wait`); `count` is told of each "requests"
    and "retries". PostFailed when it still fails, at once on another 4xx or a Retry-After beyond the limit."""
    body = json.dumps(payload).encode()
    reason, wait, transient = "no attempt", 0.0, True
    for attempt in range(how.retries + 1):
        backoff = min(how.max_backoff_s, how.backoff_s * 2**attempt)  # before the next attempt
        if attempt:
            count("retries")
            time.sleep(wait)
        count("requests")
        wait = backoff
        try:
            with opener.open(urllib.request.Request(url, body, headers), timeout=how.timeout_s) as resp:
                return resp.read()
        except urllib.error.HTTPError as err:
            reason = f"HTTP {err.code} {err.reason}"
            if err.code not in _RETRYABLE:
                raise PostFailed(reason, attempt + 1, transient=False) from None  # the request is wrong
            wait, why = next_wait(err.code, err.headers.get("Retry-After"), backoff, how.max_retry_after_s)
            if wait is None:
                raise PostFailed(why, attempt + 1, transient=True) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError, http.client.HTTPException) as err:
            reason = str(getattr(err, "reason", None) or err) or type(err).__name__
    raise PostFailed(reason, how.retries + 1, transient)


def _check_seconds(key: str, **seconds: Any) -> None:
    """The waits are finite numbers of seconds; a negative `timeout_s` would be urllib's traceback mid-run."""
    for name, value in seconds.items():
        positive = name == "timeout_s"
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise ConfigError(f"{key}.{name}", value, f"use a finite number of seconds {'>' if positive else '>='} 0")


def _check(key: str, kwargs: dict[str, Any]) -> None:
    names = ("timeout_s", "backoff_s", "max_backoff_s", "max_retry_after_s")
    _check_seconds(key, **{k: kwargs[k] for k in names if k in kwargs})


def probe(key: str, kw: dict[str, Any]) -> None:
    """RunError when nothing answers at the service's URL, tried as a batch is (`retries` + 1 times, `timeout_s`
    each); any HTTP answer, an error status included, means it is up. A service that accepts connections and
    never answers then costs these seconds before any weights load, not every batch's timed-out retries."""
    url = str(kw.get("url"))
    timeout, tries = float(kw.get("timeout_s", 30.0)), int(kw.get("retries", 3)) + 1
    headers = {"Content-Type": "application/json"}
    env = kw.get("auth_env")
    if env and env in os.environ:
        headers[str(kw.get("auth_header", "Authorization"))] = f"{kw.get('auth_scheme', 'Bearer')} {os.environ[env]}"
    opener = opener_for(url)
    reason = "no attempt"
    for _ in range(tries):
        try:
            with opener.open(urllib.request.Request(url, b'{"items": []}', headers), timeout=timeout):
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
            reason = str(getattr(err, "reason", None) or err) or type(err).__name__
    raise RunError(
        f"{key}.url={url}: the reward service does not answer ({reason}; {tries} tries of {timeout:g} s); "
        "start it or fix the URL (rlexp validate dry-runs it)"
    )


@register("http", check=_check, probe=probe)
def http_reward(
    url: str,
    auth_env: str | None = None,
    auth_header: str = "Authorization",
    auth_scheme: str = "Bearer",
    timeout_s: float = 30.0,
    retries: int = 3,
    backoff_s: float = 0.5,
    max_backoff_s: float = 8.0,
    max_concurrency: int = 8,
    batch_size: int = 16,
    max_retry_after_s: float = 60.0,
) -> RewardFn:
    """A reward computed by POSTing batches of {prompt, completion, answer, id} to `url`."""
    if urlparse(url).scheme not in ("http", "https"):
        raise ConfigError("reward.functions[].kwargs.url", url, "use an http:// or https:// URL")
    if auth_env and auth_env not in os.environ:
        raise ConfigError("reward.functions[].kwargs.auth_env", auth_env, "set this environment variable")
    _check_seconds("reward.functions[].kwargs", timeout_s=timeout_s, backoff_s=backoff_s, max_backoff_s=max_backoff_s,
                   max_retry_after_s=max_retry_after_s)  # fmt: skip
    if max_concurrency < 1 or batch_size < 1 or retries < 0:
        raise ConfigError("reward.functions[].kwargs", "http", "max_concurrency, batch_size >= 1 and retries >= 0")
    opener = opener_for(url)
    counters = _Counters()
    executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="rlexp-http-reward")

    def post(items: list[dict[str, Any]]) -> list[float]:
        headers = {"Content-Type": "application/json"}
        if auth_env:
            headers[auth_header] = f"{auth_scheme} {os.environ[auth_env]}".strip()
        try:
            raw = post_json(opener, url, {"items": items}, headers, Retries(timeout_s, retries, backoff_s,
                            max_backoff_s, max_retry_after_s), counters.add)  # fmt: skip
        except PostFailed as err:
            counters.add("failed_batches")
            # the cause, for the preflight and the training error budget (rlexp.rewards.compose reads it)
            http.last_error = f"POST {url} failed after {err.attempts} attempt(s): {err.reason}"  # type: ignore[attr-defined]
            return [math.nan] * len(items)
        try:
            values = _floats(json.loads(raw), len(items))
        except ValueError:
            values = None
        if values is None:
            counters.add("invalid_responses")
            http.last_error = f"POST {url}: answer is not {{'rewards': [numbers]}}"  # type: ignore[attr-defined]
            return [math.nan] * len(items)
        return values

    def http(prompts: Any, completions: Any, answer: Any = None, **fields: Any) -> list[float]:
        n = len(completions)
        columns = [_column(v, n) for v in (prompts, completions, answer, fields.get("id"))]
        items = [{"prompt": p, "completion": c, "answer": a, "id": i} for p, c, a, i in zip(*columns, strict=True)]
        batches = [items[k : k + batch_size] for k in range(0, n, batch_size)]
        return [v for batch in executor.map(post, batches) for v in batch]

    http.counters = counters.values  # type: ignore[attr-defined]
    http.drain_metrics = counters.drain  # type: ignore[attr-defined]
    http.last_error = None  # type: ignore[attr-defined]
    http.close = lambda: executor.shutdown(wait=True)  # type: ignore[attr-defined]
    return http
