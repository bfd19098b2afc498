"""A loopback dependency that changes behaviour after N requests: a judge (OpenAI chat completions), a reward
service (reward=http's protocol) and an http tool (the calculator as a service: `{"arguments": {"expression"}}`,
a 400 for a bad one) in one server, answering by what each request carries.

After `after` requests it turns to `then`: `5xx` (503 for the next `burst` requests, then healthy again), `slow`
(each answer `slow_s` late) or `down` (the port closes: connections are refused); `down_after` closes the port
after that many requests whatever `then` did before (a burst first, an outage later); `heal()` makes it healthy
on the same port. Answers are deterministic: the judge's score and the reward follow a checksum of the text graded.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rlexp.tools.builtin import evaluate_expression


def _score(text: str) -> float:
    return (zlib.crc32(text.encode()) % 5) / 4


class SwitchServer:
    def __init__(
        self, after: int, then: str, burst: int = 0, slow_s: float = 2.0, down_after: int | None = None
    ) -> None:
        assert then in ("5xx", "slow", "down")
        self.after, self.then, self.burst, self.slow_s = after, then, burst, slow_s
        self.down_after = down_after if then != "down" else after
        self.requests = self.refused = 0
        self.healthy = False
        self.lock = threading.Lock()
        self.port = 0
        self._serve()

    def _serve(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with owner.lock:
                    owner.requests += 1
                    faulty = not owner.healthy and owner.requests > owner.after
                    refuse = faulty and owner.then == "5xx" and owner.refused < owner.burst
                    owner.refused += refuse
                    down = not owner.healthy and owner.down_after is not None and owner.requests > owner.down_after
                if down:
                    threading.Thread(target=owner.close, daemon=True).start()
                    self.close_connection = True
                    return  # no answer: the client sees the connection closed
                if faulty and owner.then == "slow":
                    time.sleep(owner.slow_s)
                if refuse:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self._answer(body)

            def _answer(self, body: dict) -> None:
                if "messages" in body:  # a judge's chat completion
                    text = f"Score: {_score(str(body['messages'][-1].get('content', '')))}"
                    payload = {"object": "chat.completion", "model": "switch", "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}  # fmt: skip
                elif "items" in body:  # reward=http
                    payload = {"rewards": [_score(str(i.get("completion"))) for i in body["items"]]}
                else:  # an http tool: the calculator as a service (an expression), else an echo
                    arguments = body.get("arguments") or {}
                    if "expression" not in arguments:
                        payload = {"result": json.dumps(arguments)}
                    else:
                        try:
                            payload = {"result": evaluate_expression(str(arguments["expression"]))}
                        except (ValueError, SyntaxError, ArithmeticError, TypeError):
                            self.send_response(400)  # the model's bad expression: the request is wrong
                            self.send_header("Content-Length", "0")
                            self.end_headers()
                            return
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (its timeout)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def heal(self) -> None:
        """Healthy from now on, listening again on the same port when it went down."""
        self.healthy = True
        if self.down_after is not None:
            self.server.server_close()
            self._serve()
