"""Builtin tools and faults: a tool that raises, hangs or answers garbage yields an error message and a count."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from rlexp.config.schema import ToolConfig
from rlexp.tools import register
from rlexp.tools.toolbox import ToolBox


@register("test_raises", "raises")
def _raises(arguments):  # noqa: ANN001, ANN202
    raise RuntimeError("boom")


@register("test_hangs", "sleeps")
def _hangs(arguments):  # noqa: ANN001, ANN202
    time.sleep(2)
    return "late"


@register("test_garbage", "answers an object JSON cannot carry")
def _garbage(arguments):  # noqa: ANN001, ANN202
    return object()


def box(*names: str, timeout_s: float = 0.3, **kwargs: dict) -> ToolBox:
    return ToolBox([ToolConfig(name=n, kwargs=kwargs.get(n, {})) for n in names], timeout_s=timeout_s)


@pytest.mark.parametrize(
    ("name", "words"),
    [("test_raises", "RuntimeError: boom"), ("test_hangs", "timed out after 0.3 s"), ("test_garbage", "TypeError")],
)
def test_a_faulty_tool_is_a_message_and_a_counted_error(name, words) -> None:  # noqa: ANN001
    b = box(name)
    text, failed = b.call(name, {})
    assert failed and text.startswith("error:") and words in text
    assert b.errors == 1


def test_calculator_and_add() -> None:
    b = box("calculator", "add")
    assert b.call("calculator", {"expression": "12+34*2"}) == ("80", False)
    assert b.call("calculator", {"expression": "7/2"}) == ("3.5", False)
    text, failed = b.call("calculator", {"expression": "__import__('os')"})
    assert failed and "only numbers" in text
    assert b.call("add", {"numbers": [1, 2, 3.5]}) == ("6.5", False)
    assert b.call("add", {"numbers": "12"})[1]


@pytest.mark.slow
def test_python_runs_in_the_sandbox_without_network() -> None:
    b = box("python", timeout_s=20.0)
    assert b.call("python", {"code": "print(sum(range(10)))"}) == ("45\n", False)
    text, _ = b.call("python", {"code": "import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)"})
    assert "OSError" in text or "Error" in text  # no network inside bubblewrap
    text, _ = b.call("python", {"code": "1/0"})
    assert "ZeroDivisionError" in text


class _Echo(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        out = json.dumps({"result": f"{body['arguments']['q']}:{self.headers.get('Authorization')}"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


def test_http_sends_the_token_from_the_environment(monkeypatch) -> None:  # noqa: ANN001
    server = HTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("RLEXP_TEST_TOOL_TOKEN", "s3cret")
    url = f"http://127.0.0.1:{server.server_port}/"
    b = box("http", timeout_s=5.0, http={"url": url, "token_env": "RLEXP_TEST_TOOL_TOKEN"})
    assert b.call("http", {"q": "hi"}) == ("hi:Bearer s3cret", False)
    server.shutdown()
    server.server_close()
    text, failed = b.call("http", {"q": "hi"})  # the server is gone: a message, not a crash
    assert failed and "s3cret" not in text


def test_a_tool_over_its_error_budget_is_named_with_its_error() -> None:
    """Per tool and since the last drain: at budget 1 only a tool failing every call stops the run; below 1, more
    than that share; a tool name the model made up counts against no tool."""
    b = box("calculator", "add", calculator={"precision": 3})
    for _ in range(3):
        b.call("calculator", {"expression": "1+1"})
        b.call("add", {"numbers": [1, 2]})
    b.call("made_up", {})
    err = b.over_budget(1.0)
    assert err is not None and str(err).startswith("agent.tool_error_budget=1: tool calculator failed 3 of its 3 calls")
    assert "unexpected keyword argument 'precision'" in str(err) and b.over_budget(1.0) is None  # drained
    good = box("calculator")
    good.call("calculator", {"expression": "1+1"}), good.call("calculator", {"expression": "x"})
    assert good.over_budget(1.0) is None  # one of two failed: not all
    good.call("calculator", {"expression": "1+1"}), good.call("calculator", {"expression": "x"})
    assert "failed 1 of its 2 calls" in str(good.over_budget(0.4))
