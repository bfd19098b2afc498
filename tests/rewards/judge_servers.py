"""Servers for the judge tests, all on loopback: `transformers serve` on a rigged tiny checkpoint, and faults.

`rigged_checkpoint` writes a one-layer Llama with a character tokenizer and a chat template whose attention
and MLP outputs are zero, so each next token depends on the current token only; its embeddings and lm_head
are set so greedy decoding after any prompt spells `answer` and stops: a real model behind a real
OpenAI-compatible server, with a known verdict. `FaultServer` answers chat completions the ways endpoints
fail: slowly, with non-JSON, without choices, with an answer no regex parses, with scores out of range, or busy
(429 or 503 with `Retry-After` for its next `busy` requests; `busy/http` answers reward=http's protocol); `graded`
scores each request by a checksum of its last message (0, 0.25, ... 1): a judge that varies, deterministically.
"""

from __future__ import annotations

import json
import os
import socket
import string
import subprocess
import sys
import threading
import time
import urllib.request
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:\n{% endif %}"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rigged_checkpoint(out: Path, answer: str = "Score: 1") -> Path:
    """A tiny Llama checkpoint whose greedy reply to any chat is `answer` (no character may repeat)."""
    import tokenizers
    import torch
    import transformers

    assert len(set(answer)) == len(answer), "a token-to-token chain needs distinct characters"
    chars = [c for c in string.printable if c not in "\r\x0b\x0c\t"]
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    tok.decoder = tokenizers.decoders.Fuse()
    tok.add_special_tokens(["<pad>", "<s>", "</s>"])
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    v, d = len(vocab), 128
    cfg = transformers.LlamaConfig(
        vocab_size=v, hidden_size=d, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=8192, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    ids = [vocab[c] for c in answer] + [2]
    successor = dict(zip(ids, ids[1:], strict=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.zero_()  # the residual stream carries the current token's embedding alone
        model.model.embed_tokens.weight.copy_(torch.eye(v, d))
        head = torch.zeros(v, d)
        for i in range(v):
            head[successor.get(i, ids[0]), i] = 1.0
        model.lm_head.weight.copy_(head)
    model.generation_config = transformers.GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


class TransformersServe:
    """`transformers serve <checkpoint>` as a subprocess on a free loopback port, offline."""

    def __init__(self, checkpoint: Path, workdir: Path) -> None:
        self.port = free_port()
        self.model = str(checkpoint)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        cache = workdir / "hf_cache"
        cache.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache),
               "NO_PROXY": "127.0.0.1,localhost", "OMP_NUM_THREADS": "1"}  # fmt: skip
        code = "import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; main()"
        args = ["serve", "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu", self.model]
        self.log = open(workdir / "serve.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=self.log, stderr=subprocess.STDOUT, env=env
        )

    def wait(self, timeout_s: float = 120.0) -> TransformersServe:
        deadline = time.monotonic() + timeout_s
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with opener.open(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"transformers serve did not answer {self.base_url}/models in {timeout_s} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _completion(content: str) -> dict:
    return {
        "id": "x", "object": "chat.completion", "model": "fault",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }  # fmt: skip


def _graded(body: dict) -> float:
    messages = body.get("messages") or [{}]
    return (zlib.crc32(str(messages[-1].get("content", "")).encode()) % 5) / 4


class FaultServer:
    """Chat completions at http://127.0.0.1:<port>/<mode>/v1 for mode in ok, slow, garbage, nochoices, unparsable."""

    def __init__(self, slow_s: float = 2.0) -> None:
        self.requests: list[dict] = []
        self.busy, self.busy_status, self.retry_after = 0, 429, "1"  # busy mode: refusals left, status, header
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                owner.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                mode = self.path.strip("/").split("/")[0]
                if mode == "slow":
                    time.sleep(slow_s)
                if mode == "busy":
                    with owner.lock:
                        refuse, owner.busy = owner.busy > 0, owner.busy - 1
                    if refuse:
                        self.send_response(owner.busy_status)
                        self.send_header("Retry-After", owner.retry_after)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                payload = {
                    "busy/http": json.dumps({"rewards": [1.0] * len(body.get("items", []))}),  # reward=http's answer
                }.get(self.path.strip("/")) or {
                    "ok": json.dumps(_completion("Reasoning... Score: 0.2 then finally Score: 0.5")),
                    "busy": json.dumps(_completion("Score: 1")),
                    "graded": json.dumps(_completion(f"Score: {_graded(body)}")),
                    "huge": json.dumps(_completion("Score: 1e9")),
                    "billion": json.dumps(_completion("Score: 1000000000")),
                    "slow": json.dumps(_completion("Score: 1")),
                    "garbage": "<html>502 upstream</html>",
                    "nochoices": json.dumps({"object": "chat.completion", "choices": []}),
                    "unparsable": json.dumps(_completion("I cannot decide.")),
                }.get(mode, "{}")
                data = payload.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}/v1"

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
