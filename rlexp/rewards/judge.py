"""`judge`: an LLM judge behind any OpenAI-compatible chat-completions endpoint.

Works with `vllm serve`, SGLang, `transformers serve`, Gemini's OpenAI-compatible endpoint or any
service speaking `POST <base_url>/chat/completions`. Per completion the judge prompt is
`prompt_template` with `{prompt}` (what the policy saw), `{response}` (the completion),
`{system_instruction}` and `{references.<column>}` (a column of the data row, e.g. `answer`) filled
in; `{{` and `}}` are literal braces. The judge is asked `samples` times and the scores averaged.
From each answer `answer_regex` takes the last match (group 1 when the pattern has a group); then
`scorer: number` reads it as a number, the whole number the text has there ("1e9" is 1e9, never the 1 a
regex stopped at), which must lie in the declared range, `score_range` (then mapped onto [0, 1]) or else
[-1, 1]: one outside it is an invalid response, unless `clip: true` declares clipping it into the range.
`scorer: exact_match` scores `correct_value` when it equals `match` (case-insensitive, stripped), else
`wrong_value`.

A timeout, a refused connection, a 429 or a 5xx is retried `retries` times with exponential backoff
(`backoff_s`, doubling, capped at `max_backoff_s`); a 429 or 503 with `Retry-After` (seconds or an HTTP date)
waits that long when it is longer, and one asking for more than `max_retry_after_s` is an RPC error at once;
what still fails, or a 4xx, is an RPC error. An answer that is not a chat completion, whose text the regex
cannot parse, or whose score is not a finite number in range is an invalid response.
A completion none of whose samples scored is NaN: the reward set counts it as an errored invocation
and scores it 0. The API key is read from the environment variable `api_key_env` at each call and
is never stored, logged or written. `drain_metrics()` reports, per step, the judge's token usage
(the endpoint's `usage`), per-call latency and the RPC-error and invalid ratios;
`price_per_million_tokens` prices the tokens (rlexp.estimates.cost).
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlparse

from rlexp.config.judge import DEFAULT_TEMPLATE, placeholders
from rlexp.errors import ConfigError, RunError
from rlexp.rewards.registry import RewardFn, register

DEFAULT_REGEX = r"(?i)score\s*[:=]\s*(-?\d+(?:\.\d+)?)"
# what may continue a number past a regex's match: more digits, a fraction, an exponent
_NUMBER_TAIL = re.compile(r"\d*(?:\.\d+)?(?:[eE][+-]?\d+)?")
SCORERS = ("number", "exact_match")
_FIELDS = ("prompt", "response", "system_instruction")
_RETRYABLE = {429, 500, 502, 503, 504}
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def reference_columns(template: str) -> list[str]:
    return [f.split(".", 1)[1] for f in placeholders(template) if f.startswith("references.")]


def check_kwargs(key: str, kw: dict[str, Any]) -> None:
    """The judge's config rules, checked before anything loads: each failure one ConfigError line."""
    model = kw.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(
            f"{key}.model",
            model,
            "name the judge model the endpoint serves (e.g. Qwen/Qwen3-8B); without it every call fails",
        )
    url = kw.get("base_url", "")
    if urlparse(str(url)).scheme not in ("http", "https") or not urlparse(str(url)).netloc:
        raise ConfigError(f"{key}.base_url", url, "use the endpoint's http(s) URL, e.g. http://127.0.0.1:8000/v1")
    template = kw.get("prompt_template", DEFAULT_TEMPLATE)
    try:
        fields = placeholders(str(template))
    except ValueError as err:
        raise ConfigError(f"{key}.prompt_template", template, f"{err}; write literal braces as {{{{ and }}}}") from None
    for f in fields:
        col = f.split(".", 1)[1] if f.startswith("references.") else None
        if f not in _FIELDS and not (col and _IDENT.match(col)):
            raise ConfigError(
                f"{key}.prompt_template",
                "{" + f + "}",
                "unknown placeholder; use {prompt}, {response}, {system_instruction} or {references.<column>}",
            )
    _number(key, kw, "samples", 1, lo=1, hi=32, integer=True)
    _number(key, kw, "timeout_s", 60.0, lo=0.0, strict=True)
    _number(key, kw, "retries", 3, lo=0, integer=True)
    _number(key, kw, "backoff_s", 0.5, lo=0.0)
    _number(key, kw, "max_backoff_s", 8.0, lo=0.0)
    _number(key, kw, "max_retry_after_s", 60.0, lo=0.0)
    if not isinstance(kw.get("clip", False), bool):
        raise ConfigError(f"{key}.clip", kw.get("clip"), "use true (clip scores into the range) or false")
    _number(key, kw, "max_concurrency", 8, lo=1, integer=True)
    _number(key, kw, "max_tokens", 256, lo=1, integer=True)
    _number(key, kw, "temperature", 0.0, lo=0.0, hi=2.0)
    if kw.get("price_per_million_tokens") is not None:
        _number(key, kw, "price_per_million_tokens", 0.0, lo=0.0)
    regex = kw.get("answer_regex", DEFAULT_REGEX)
    try:
        re.compile(str(regex))
    except re.error as err:
        raise ConfigError(f"{key}.answer_regex", regex, f"not a regular expression ({err})") from None
    scorer = kw.get("scorer", "number")
    if scorer not in SCORERS:
        raise ConfigError(f"{key}.scorer", scorer, f"use one of {', '.join(SCORERS)}")
    if scorer == "exact_match" and not kw.get("match"):
        raise ConfigError(
            f"{key}.match", kw.get("match"), "scorer=exact_match needs the answer that scores correct_value"
        )
    rng = kw.get("score_range")
    if rng is not None and (len(rng) != 2 or not float(rng[0]) < float(rng[1])):
        raise ConfigError(f"{key}.score_range", list(rng), "use [low, high] with low < high, or null")
    env = kw.get("api_key_env")
    if env and env not in os.environ:
        raise ConfigError(f"{key}.api_key_env", env, "export this environment variable with the endpoint's API key")


def _number(key: str, kw: dict[str, Any], name: str, default: float, *, lo: float, hi: float | None = None,
            strict: bool = False, integer: bool = False) -> None:  # fmt: skip
    v = kw.get(name, default)
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ok = ok and (v > lo if strict else v >= lo) and (hi is None or v <= hi) and (not integer or float(v).is_integer())
    if not ok:
        span = f"({lo}, {hi if hi is not None else 'inf'})" if strict else f"[{lo}, {hi if hi is not None else 'inf'})"
        span = span[:-1] + "]" if hi is not None else span
        raise ConfigError(f"{key}.{name}", v, f"use {'an integer' if integer else 'a number'} in {span}")


class _Meter:
    """Thread-safe per-step counts of the judge's calls, drained once per step; token totals kept for the run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.run_tokens = {"prompt_tokens": 0, "completion_tokens": 0}
        self.reset()

    def reset(self) -> None:
        self.calls = self.rpc_errors = self.invalid = self.retries = 0
        self.tokens = {"prompt_tokens": 0, "completion_tokens": 0}
        self.latencies: list[float] = []

    def drain(self) -> dict[str, float]:
        with self.lock:
            lat = sorted(self.latencies)
            out = {
                "judge_calls": float(self.calls),
                "judge_retries": float(self.retries),
                "judge_rpc_errors": float(self.rpc_errors),
                "invalid": float(self.invalid),  # answers that are no chat completion, or carry no score in range
                "judge_prompt_tokens": float(self.tokens["prompt_tokens"]),
                "judge_completion_tokens": float(self.tokens["completion_tokens"]),
                "judge_tokens": float(sum(self.tokens.values())),
                "rpc_error_ratio": self.rpc_errors / self.calls if self.calls else 0.0,
                "invalid_ratio": self.invalid / self.calls if self.calls else 0.0,
            }
            if lat:
                out["latency_mean_s"] = sum(lat) / len(lat)
                out["latency_p95_s"] = lat[min(len(lat) - 1, math.ceil(0.95 * len(lat)) - 1)]
            self.reset()
        return out


def _to_score(text: str, pattern: re.Pattern[str], scorer: str, match: str | None, rng: Any,
              correct: float, wrong: float, clip: bool = False) -> float | None:  # fmt: skip
    """The score of one judge answer, or None when it is an invalid response (`_read_score`)."""
    return _read_score(text, pattern, scorer, match, rng, correct, wrong, clip)[0]


def _read_score(text: str, pattern: re.Pattern[str], scorer: str, match: str | None, rng: Any,
                correct: float, wrong: float, clip: bool = False) -> tuple[float | None, str]:  # fmt: skip
    """(score, why it is None): None when the regex finds nothing, or the number is not finite or lies outside
    the declared range (`score_range`, else [-1, 1]) and `clip` is off."""
    found = list(pattern.finditer(text))
    if not found:
        return None, f"answer {text[:80]!r} does not match answer_regex"
    last = found[-1]
    group = 1 if pattern.groups else 0
    value = last.group(group)
    if value is None:
        return None, f"answer {text[:80]!r} does not match answer_regex"
    if scorer == "exact_match":
        return (correct if value.strip().casefold() == str(match).strip().casefold() else wrong), ""
    # the whole number: a regex that stops at "1" of "1e9" or "1.5" must not make a score of it
    value += _NUMBER_TAIL.match(text, last.end(group)).group(0)
    try:
        x = float(value)
    except ValueError:
        return None, f"score {value[:40]!r} of answer {text[:80]!r} is not a number"
    lo, hi = (float(rng[0]), float(rng[1])) if rng is not None else (-1.0, 1.0)
    if not math.isfinite(x) or (not clip and not lo <= x <= hi):
        return None, f"score {value[:40]} is not a finite number in [{lo:g}, {hi:g}] (clip: true clips into it)"
    x = max(lo, min(hi, x))
    return ((x - lo) / (hi - lo) if rng is not None else x), ""


def probe(key: str, kw: dict[str, Any]) -> None:
    """RunError when nothing answers at the judge's endpoint (any HTTP answer, an error status included, is up)."""
    import httpx

    base_url = str(kw.get("base_url") or "http://127.0.0.1:8000/v1")
    env = kw.get("api_key_env")
    headers = {"Authorization": f"Bearer {os.environ[env]}"} if env and env in os.environ else {}
    timeout = min(float(kw.get("timeout_s", 60.0)), 10.0)
    try:
        trust = urlparse(base_url).hostname not in _LOOPBACK
        httpx.get(base_url.rstrip("/") + "/models", headers=headers, timeout=timeout, trust_env=trust)
    except httpx.TransportError as err:
        raise RunError(
            f"{key}.base_url={base_url}: the judge does not answer ({type(err).__name__}); start its server "
            "or fix the URL (rlexp validate dry-runs it)"
        ) from None


@register("judge", check=check_kwargs, probe=probe)
def judge_reward(
    model: str | None = None,
    base_url: str = "http://127.0.0.1:8000/v1",
    api_key_env: str | None = None,
    prompt_template: str = DEFAULT_TEMPLATE,
    system_instruction: str = "",
    judge_system_prompt: str | None = None,
    answer_regex: str = DEFAULT_REGEX,
    scorer: str = "number",
    score_range: list[float] | None = None,
    match: str | None = None,
    correct_value: float = 1.0,
    wrong_value: float = 0.0,
    samples: int = 1,
    temperature: float = 0.0,
    max_tokens: int = 256,
    timeout_s: float = 60.0,
    retries: int = 3,
    backoff_s: float = 0.5,
    max_backoff_s: float = 8.0,
    max_concurrency: int = 8,
    price_per_million_tokens: float | None = None,
    clip: bool = False,
    max_retry_after_s: float = 60.0,
) -> RewardFn:
    """A reward asked of an LLM judge: the mean parsed score of `samples` chat completions per item."""
    import httpx

    from rlexp.rewards.http_reward import _column, next_wait

    kw = {k: v for k, v in locals().items() if k not in ("httpx", "_column", "next_wait")}
    check_kwargs("reward.functions[].kwargs", kw)
    pattern = re.compile(answer_regex)
    columns = reference_columns(prompt_template)
    url = base_url.rstrip("/") + "/chat/completions"
    meter = _Meter()
    client = httpx.Client(
        timeout=httpx.Timeout(timeout_s),
        limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        trust_env=urlparse(base_url).hostname not in _LOOPBACK,  # no proxy between us and a local judge
    )
    executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="rlexp-judge")

    def ask(text: str) -> float | None:
        messages = ([{"role": "system", "content": judge_system_prompt}] if judge_system_prompt else []) + [
            {"role": "user", "content": text}
        ]
        body = {"model": model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens}
        headers = {"Authorization": f"Bearer {os.environ[api_key_env]}"} if api_key_env else {}
        reason, wait = "no attempt", 0.0
        t0 = time.monotonic()
        for attempt in range(retries + 1):
            backoff = min(max_backoff_s, backoff_s * 2**attempt)  # before the next attempt
            if attempt:
                with meter.lock:
                    meter.retries += 1
                time.sleep(wait)
            wait = backoff
            try:
                resp = client.post(url, json=body, headers=headers)
            except httpx.TransportError as err:  # refused, reset, timed out
                reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
                continue
            if resp.status_code in _RETRYABLE:
                after = resp.headers.get("Retry-After")
                asked, reason = next_wait(resp.status_code, after, backoff, max_retry_after_s)
                if asked is None:
                    break
                wait = asked
                continue
            if resp.status_code != 200:
                reason = f"HTTP {resp.status_code}: {resp.text[:200]!r}"
                break
            score, why = _parse(resp)
            with meter.lock:
                meter.calls += 1
                meter.latencies.append(time.monotonic() - t0)
                if score is None:
                    meter.invalid += 1
            if score is None:
                judge.last_error = f"POST {url}: invalid judge response ({why})"  # type: ignore[attr-defined]
            return score
        with meter.lock:
            meter.calls += 1
            meter.rpc_errors += 1
            meter.latencies.append(time.monotonic() - t0)
        judge.last_error = f"POST {url} failed after {attempt + 1} attempt(s): {reason}"  # type: ignore[attr-defined]
        return None

    def _parse(resp: Any) -> tuple[float | None, str]:
        try:
            payload = resp.json()
        except ValueError:
            return None, f"not JSON: {resp.text[:80]!r}"
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if isinstance(usage, dict):
            with meter.lock:
                for k in ("prompt_tokens", "completion_tokens"):
                    n = usage.get(k)
                    if isinstance(n, int) and n >= 0:
                        meter.tokens[k] += n
                        meter.run_tokens[k] += n
        try:
            content = payload["choices"][0]["message"]["content"]
            if not isinstance(content, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            return None, f"no choices[0].message.content in {str(payload)[:80]!r}"
        return _read_score(content, pattern, scorer, match, score_range, correct_value, wrong_value, clip)

    def judge(prompts: Any, completions: Any, **fields: Any) -> list[float]:
        n = len(completions)
        prompt_col, completion_col = _column(prompts, n), _column(completions, n)
        refs = {c: _column(fields.get(c), n) for c in columns}
        missing = [c for c in columns if fields.get(c) is None]
        if missing:
            raise ValueError(f"prompt_template uses {{references.{missing[0]}}} but the rows have no {missing[0]!r}")
        texts = [
            prompt_template.format(
                prompt=prompt_col[i],
                response=completion_col[i],
                system_instruction=system_instruction,
                references=types.SimpleNamespace(**{c: refs[c][i] for c in columns}),
            )
            for i in range(n)
        ]
        scores = list(executor.map(ask, [t for t in texts for _ in range(samples)]))
        out = []
        for i in range(n):
            got = [s for s in scores[i * samples : (i + 1) * samples] if s is not None]
            out.append(sum(got) / len(got) if got else math.nan)
        return out

    def close() -> None:
        executor.shutdown(wait=True)
        client.close()

    judge.last_error = None  # type: ignore[attr-defined]
    judge.drain_metrics = meter.drain  # type: ignore[attr-defined]
    judge.token_totals = meter.run_tokens  # type: ignore[attr-defined]
    judge.close = close  # type: ignore[attr-defined]
    return judge
