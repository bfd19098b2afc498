"""The tests' side of the guessing game (tests/envs/guess_server.py): its tasks, their hidden numbers, and the server
started on a free loopback port. Apart from the server module so that collecting a test imports no OpenEnv (its
server package takes seconds to import, once in every pytest worker)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

SERVER = str(Path(__file__).resolve().with_name("guess_server.py"))

SPLITS = {"train": 48, "test": 12, "slow": 4, "nanreward": 4, "malformed": 4}


def target(split: str, index: int) -> int:
    return (index * 5 + len(split)) % 9 + 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(*flags: str, timeout_s: float = 120.0) -> Iterator[str]:
    """The game served on a free loopback port (this file run with `flags`) until the block ends: its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--port", str(port), *flags])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert proc.poll() is None, f"the guess server exited with code {proc.returncode}"
            try:
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(f"{url}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the guess server did not answer /health"
                time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
