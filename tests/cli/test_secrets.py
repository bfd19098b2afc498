"""No secret in any output (rlexp.redact): a secret is planted in each place one can be given (HF_TOKEN,
WANDB_API_KEY, a judge's `api_key_env`, an http reward's `auth_env`, a key given directly in kwargs), the user's
commands run, and every line of stdout and stderr and every file they wrote is searched for it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlexp import redact
from tests.helpers import SHORT, rlexp_command, rlexp_env

HF = "hf_PLANTEDhf0123456789"
WANDB = "PLANTEDwandb0123456789abcdef"
JUDGE = "sk-PLANTEDjudge-0123456789"
HTTP = "PLANTEDhttp-token-0123"
DIRECT = "sk-PLANTEDdirect-0123456789"
ALL = (HF, WANDB, JUDGE, HTTP, DIRECT)


# -- the pass itself -------------------------------------------------------------------------------------------
def test_names_that_hold_secrets() -> None:
    for name in ("api_key", "apikey", "token", "auth_token", "client_secret", "password", "openai_api_key"):
        assert redact.secret_name(name), name
    for name in ("max_tokens", "bos_token", "eos_token", "key", "answer_key", "api_key_env", "tokenizer"):
        assert not redact.secret_name(name), name


def test_config_argv_and_env_are_scrubbed_in_every_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "_values", set())
    monkeypatch.setattr(redact, "_env_names", set(redact.ALWAYS_ENV))
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("MY_JUDGE_KEY", JUDGE)
    redact.note_config({"reward": {"functions": [{"kwargs": {"api_key_env": "MY_JUDGE_KEY", "max_tokens": 256}}]}})
    redact.note_argv(["agent.tools.0.kwargs={url: 'http://x', password: hunter2secret}", f"+x.api_key={DIRECT}"])
    redact.note_value('pw"quoted1')
    text = f"{HF} {JUDGE} {DIRECT} hunter2secret 256 " + json.dumps({"k": 'pw"quoted1'})
    out = redact.scrub(text)
    assert not any(s in out for s in (HF, JUDGE, DIRECT, "hunter2secret", "quoted1")), out
    assert "256" in out
    record = logging.LogRecord("rlexp", logging.ERROR, __file__, 1, "key %s", (JUDGE,), None)
    redact.RedactFilter().filter(record)
    assert JUDGE not in logging.Formatter().format(record)
    assert redact.scrub_data({"a": [JUDGE, 1.0]}) == {"a": ["***", 1.0]}


# -- the user's commands -----------------------------------------------------------------------------------------
class _Echo(BaseHTTPRequestHandler):
    """A server that refuses every request with 401 and echoes the credentials it got in the body."""

    def log_message(self, *args: object) -> None:
        pass

    def _refuse(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": f"invalid credentials: {self.headers.get('Authorization')}"}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse  # noqa: N815 - the stdlib's names


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _run(args: list[str], module: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(HF_TOKEN=HF, WANDB_API_KEY=WANDB, MY_JUDGE_KEY=JUDGE, MY_HTTP_TOKEN=HTTP, WANDB_MODE="offline")
    return subprocess.run(
        rlexp_command(*args, module=module), cwd=cwd, env=rlexp_env(env), capture_output=True, text=True,
        timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def assert_no_secret(proc: subprocess.CompletedProcess, root: Path) -> None:
    """No planted secret on stdout, stderr or in any file below `root` (the run dir, validation.json, logs)."""
    for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        assert not [s for s in ALL if s in text], f"a secret on {name}:\n{text[-3000:]}"
    leaked = [str(p) for p in root.rglob("*") if p.is_file() and any(s.encode() in p.read_bytes() for s in ALL)]
    assert not leaked, f"a secret in {leaked}"


def _one_line(proc: subprocess.CompletedProcess, code: int, says: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("wandb:")]
    assert proc.returncode == code, proc.stderr[-3000:]
    assert lines and lines[-1].startswith("rlexp: error: ") and says in lines[-1], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_key_given_directly_is_never_printed(tmp_path: Path) -> None:
    proc = _run(
        ["reward=judge", "reward.functions.0.kwargs.model=m", f"reward.functions.0.kwargs.api_key={DIRECT}",
         f"hydra.run.dir={tmp_path}/run"],
        "rlexp", tmp_path,
    )  # fmt: skip
    _one_line(proc, 2, "reward.functions.0.kwargs.api_key='***'")
    assert_no_secret(proc, tmp_path)


@pytest.mark.slow
def test_validate_against_servers_that_echo_the_key(echo_url: str, tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_text('{"id": "q1", "prompt": "1+1=", "answer": "2", "completion": "2"}\n')
    for reward in (
        ["reward=judge", "reward.functions.0.kwargs.model=m", f"reward.functions.0.kwargs.base_url={echo_url}/v1",
         "reward.functions.0.kwargs.api_key_env=MY_JUDGE_KEY", "reward.functions.0.kwargs.retries=0"],
        ["reward=http", f"reward.functions.0.kwargs.url={echo_url}/", "reward.functions.0.kwargs.auth_env=MY_HTTP_TOKEN",
         "reward.functions.0.kwargs.retries=0"],
    ):  # fmt: skip
        proc = _run([*reward, f"validate.completions={tmp_path}/c.jsonl", f"hydra.run.dir={tmp_path}/run"],
                    "rlexp.validate", tmp_path)  # fmt: skip
        assert proc.returncode == 1, proc.stderr[-3000:]
        if "reward=judge" in reward:  # the judge's error quotes the body: the echoed key was there, masked
            assert "***" in proc.stderr + proc.stdout, proc.stderr[-3000:]
        assert_no_secret(proc, tmp_path)


@pytest.mark.slow
def test_training_against_a_judge_that_echoes_the_key(echo_url: str, tmp_path: Path) -> None:
    proc = _run(
        [*SHORT, "reward=judge", "reward.functions.0.kwargs.model=m", "reward.functions.0.kwargs.retries=0",
         f"reward.functions.0.kwargs.base_url={echo_url}/v1", "reward.functions.0.kwargs.api_key_env=MY_JUDGE_KEY",
         "logger=tensorboard", f"hydra.run.dir={tmp_path}/run"],
        "rlexp", tmp_path,
    )  # fmt: skip
    _one_line(proc, 1, "reward")
    assert "***" in (tmp_path / "run" / "main.log").read_text()
    assert_no_secret(proc, tmp_path)


@pytest.mark.slow
def test_a_completed_run_holds_no_secret(tmp_path: Path) -> None:
    """A config value that equals a secret (here the run's name is HF_TOKEN's value) is masked in every file a
    completed run writes: config.yaml, .hydra/, summary.json, metrics, samples, main.log, the tracker's files."""
    proc = _run([*SHORT, "trainer.max_steps=4", f"run_name={HF}", "logger=tensorboard", f"hydra.run.dir={tmp_path}/run"],
                "rlexp", tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "***" in (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert_no_secret(proc, tmp_path)
