"""env=openenv's servers: reached at a URL, or started by rlexp from a command or a Docker image, ready before any
weights load, asked for their tasks over OpenEnv's Task API, and stopped when rlexp exits.

  url      a server already running (`env.url`)
  command  rlexp starts it (`env.command`, split as a shell would; `{port}` in it becomes a free loopback port and
           the server's URL http://127.0.0.1:<port>, else `env.url` says where it serves)
  image    `docker run --rm -p 127.0.0.1:<port>:8000 <image>` (OpenEnv's images serve on port 8000); refused
           before anything runs where `docker` is not on PATH (a GKE pod serves it from a sidecar instead and
           its run names the sidecar's url: rlexp.launch.env_sidecar; a Slurm job runs the image itself)

A started server is a child of rlexp that dies with it (rlexp.children: the wrapper sets PR_SET_PDEATHSIG, which
Linux keeps across the exec of the command), in a session of its own (a terminal's Ctrl-C reaches rlexp, which
stops it after its checkpoint), its output kept in a temporary file whose last line a failure quotes. It is
stopped (its process group, and the container) when rlexp exits. Start one from the main thread: Linux signals
the child when the *thread* that started it ends.

A container is the Docker daemon's, not rlexp's: killing `docker run` (rlexp's child) leaves it running. So each
image gets a reaper too, a small process in a session of its own that waits on a pipe only rlexp holds open; when
rlexp ends without stopping the container itself (SIGKILL, a crash), the pipe closes and the reaper runs
`docker rm -f` on it, then exits. A server is ready when GET /health answers within
`env.start_timeout_s`; one that exits first, or never answers, ends the run in one line before the weights load.
Every request after that waits at most `env.timeout_s`.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from rlexp.children import prelude
from rlexp.config.schema import OpenEnvServerConfig
from rlexp.errors import ConfigError, RunError

SERVER_KEYS = tuple(f.name for f in dataclasses.fields(OpenEnvServerConfig))
SPEC_KEYS = ("weight", *SERVER_KEYS)
IMAGE_PORT = 8000  # where OpenEnv's Docker images serve (their Dockerfiles' uvicorn --port)
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
_WHERE = ("url", "command", "image")  # where a server is: each task names its own; the rest a task may inherit


@dataclass(unsafe_hash=True, kw_only=True)  # a key of the live-server cache; never changed (dataclasses.replace)
class Spec(OpenEnvServerConfig):
    """One environment of the run: env.tasks.<name>, or the env itself (`key` "env"), with the server keys of
    OpenEnvServerConfig."""

    name: str
    key: str
    weight: float = 1.0

    def where(self) -> tuple[str, str]:
        """(key, value) naming the server in an error: the command or image rlexp starts, else the URL."""
        for field in _WHERE[::-1]:
            if getattr(self, field):
                return f"{self.key}.{field}", str(getattr(self, field))
        return f"{self.key}.url", ""


def specs(env: Any) -> list[Spec]:
    """The run's environments: each of env.tasks (its keys over the env's own split, eval_split, action_key,
    observation_key), or the env itself, named env.name. Shapes only; `check` holds the rules."""
    shared = {k: getattr(env, k) for k in SERVER_KEYS if k not in _WHERE}
    out = [] if env.tasks else [Spec(name=env.name, key="env", **{k: getattr(env, k) for k in SERVER_KEYS})]
    for name, spec in env.tasks.items():
        key = f"env.tasks.{name}"
        if not isinstance(spec, dict) or set(spec) - set(SPEC_KEYS):
            bad = sorted(set(spec) - set(SPEC_KEYS)) if isinstance(spec, dict) else spec
            raise ConfigError(key, bad, f"a task takes {', '.join(SPEC_KEYS)}")
        out.append(Spec(name=str(name), key=key, **{**shared, **{k: v for k, v in spec.items() if v is not None}}))
    # split names as text, whatever YAML made of them (2024: an int)
    return [dataclasses.replace(s, split=str(s.split), eval_split=_text(s.eval_split)) for s in out]


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def check_spec(spec: Spec) -> None:
    """One environment's rules, before anything runs: one server, a URL that is one, docker where an image is."""
    given = [f for f in ("url", "command", "image") if getattr(spec, f)]
    if not given:
        raise ConfigError(f"{spec.key}.url", None, "set env.url (a running server), env.command or env.image")
    if spec.image and len(given) > 1:  # a command may come with the URL it serves at; an image has its own
        raise ConfigError(f"{spec.key}.image", spec.image, f"set only one of image and {given[0]}")
    if spec.url:
        scheme = urllib.parse.urlsplit(spec.url.replace("{port}", "1")).scheme
        if scheme not in ("http", "https", "ws", "wss"):
            raise ConfigError(f"{spec.key}.url", spec.url, "use http://host:port (the server's base URL)")
    if spec.command:
        try:
            argv = shlex.split(spec.command)
        except ValueError as err:
            raise ConfigError(f"{spec.key}.command", spec.command, f"cannot split it: {err}") from None
        if not argv:
            raise ConfigError(f"{spec.key}.command", spec.command, "name the command that serves the environment")
        if "{port}" not in spec.command and not spec.url:
            raise ConfigError(
                f"{spec.key}.command", spec.command, "put {port} where it takes its port, or set env.url to its URL"
            )
    if spec.image and shutil.which("docker") is None:
        raise ConfigError(
            f"{spec.key}.image",
            spec.image,
            "docker is not on this machine's PATH; run the image yourself and set env.url to it, or use env.command",
        )
    if not isinstance(spec.weight, int | float) or spec.weight <= 0:
        raise ConfigError(f"{spec.key}.weight", spec.weight, "must be a number > 0")


class Server:
    """A reachable OpenEnv server; `proc`: the child rlexp started (None for a URL)."""

    def __init__(self, key: str, value: str, url: str, proc: Any = None, log: str | None = None) -> None:
        self.key, self.value, self.url = key, value, url.rstrip("/")
        self.proc, self.log, self.container = proc, log, None
        self.reaper: tuple[subprocess.Popen, int] | None = None  # an image's: (process, write end of its pipe)

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def last_output(self) -> str:
        if not self.log:
            return ""
        with contextlib.suppress(OSError), open(self.log, errors="replace") as f:
            lines = [line.strip() for line in f.read()[-4000:].splitlines() if line.strip()]
            return lines[-1][:300] if lines else ""
        return ""

    def gone(self) -> str | None:
        """Why the server no longer serves (its exit code and last line), or None while /health answers."""
        code = self.exited()
        if code is None:
            try:
                request(self, "/health", timeout_s=5.0)
                return None
            except RunError as err:
                if self.proc is not None:  # a child that just crashed refuses before it is reaped: its exit code
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(timeout=3)
                code = self.exited()
                if code is None:
                    return str(err).split(": ", 1)[-1]
        last = self.last_output()
        return f"the OpenEnv server exited with code {code}" + (f" (its last line: {last})" if last else "")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.container:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(["docker", "rm", "-f", self.container], capture_output=True, timeout=30, check=False)
        if self.reaper is not None:
            reaper, write = self.reaper
            self.reaper = None
            with contextlib.suppress(OSError):
                os.write(write, b"stopped")
            os.close(write)
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(timeout=10)
        if self.log:
            with contextlib.suppress(OSError):
                os.unlink(self.log)


_SERVERS: dict[tuple[Any, ...], Server] = {}
_LOCK = threading.Lock()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(argv: list[str]) -> tuple[subprocess.Popen, str]:
    """`argv` as a child dying with rlexp (the wrapper arms PR_SET_PDEATHSIG, then execs it), in its own session."""
    fd, log = tempfile.mkstemp(prefix="rlexp-openenv-", suffix=".log")
    wrapper = prelude(os.getpid()) + "import os, sys\nos.execvp(sys.argv[1], sys.argv[1:])\n"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", wrapper, *argv],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        os.close(fd)
    return proc, log


def _start(spec: Spec) -> Server:
    key, value = spec.where()
    if spec.url and not spec.command:
        return Server(key, value, spec.url)
    port = _free_port()
    url = (spec.url or "http://127.0.0.1:{port}").replace("{port}", str(port))
    if spec.command:
        proc, log = _spawn([a.replace("{port}", str(port)) for a in shlex.split(spec.command)])
        return Server(key, value, url, proc, log)
    name = f"rlexp-openenv-{os.getpid()}-{port}"
    reaper = _reaper(name)  # first: a container must never run unwatched
    proc, log = _spawn(["docker", "run", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:{IMAGE_PORT}", spec.image])
    server = Server(key, value, url, proc, log)
    server.container, server.reaper = name, reaper
    return server


# The reaper (`python -I -c`, standard library only): reads its pipe to the end; "stopped" means rlexp removed the
# container itself, anything else (rlexp died) that the reaper must.
_REAPER = """import os, subprocess, sys
fd, name, said = int(sys.argv[1]), sys.argv[2], b""
while True:
    chunk = os.read(fd, 64)
    if not chunk:
        break
    said += chunk
if said != b"stopped":
    subprocess.run(["docker", "rm", "-f", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
"""


def _reaper(container: str) -> tuple[subprocess.Popen, int]:
    """The reaper of `container` and the write end of its pipe (not inherited by any other child: O_CLOEXEC)."""
    read, write = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _REAPER, str(read), container],
            pass_fds=(read,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C or a kill of rlexp's process group leaves it to do its job
        )
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return proc, write


def reach(spec: Spec, start_timeout_s: float) -> Server:
    """The spec's server, started here if rlexp starts it, once /health answers (one per URL, command or image
    in a process); a RunError in one line when it exits first or does not answer within `start_timeout_s`."""
    ident = (spec.url, spec.command, spec.image)
    with _LOCK:
        server = _SERVERS.get(ident)
        if server is None:
            server = _SERVERS[ident] = _start(spec)
            if len(_SERVERS) == 1:
                atexit.register(stop_all)
    deadline, why = time.monotonic() + start_timeout_s, "no answer"
    while True:
        code = server.exited()
        if code is not None:
            last = server.last_output()
            raise RunError(
                f"{server.key}={server.value!r}: the server exited with code {code} before it answered"
                + (f" (its last line: {last})" if last else "")
                + "; run the command yourself to see why"
            )
        try:
            request(server, "/health", timeout_s=min(5.0, start_timeout_s))
            return server
        except RunError as err:
            why = str(err).split(": ", 1)[-1]
        if time.monotonic() > deadline:
            hint = "raise env.start_timeout_s" if server.proc is not None else "start it, or fix the URL"
            raise RunError(
                f"{server.key}={server.value!r}: no OpenEnv server answered {server.url}/health within "
                f"{start_timeout_s:g} s ({why}); {hint}"
            )
        time.sleep(0.25)


def serving(server: Server) -> bool:
    """Whether `server` is still one of this process's (not stopped by `stop_all`)."""
    with _LOCK:
        return any(s is server for s in _SERVERS.values())


def stop_all() -> None:
    """Stop every server rlexp started (atexit)."""
    with _LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.stop()


def _opener(url: str) -> urllib.request.OpenerDirector:
    host = urllib.parse.urlsplit(url).hostname or ""
    # a loopback server is reached directly, whatever proxy the environment names for the rest
    return (
        urllib.request.build_opener(urllib.request.ProxyHandler({}))
        if host in _LOOPBACK
        else urllib.request.build_opener()
    )


def http_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(
        parts._replace(scheme={"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme))
    )


def request(server: Server, path: str, timeout_s: float, body: dict[str, Any] | None = None) -> Any:
    """GET (or POST `body`) `path` of the server as JSON; a RunError naming the server when it fails."""
    url = http_url(server.url) + path
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _opener(url).open(req, timeout=timeout_s) as resp:
            return json.loads(resp.read().decode() or "null")
    except urllib.error.HTTPError as err:
        detail = err.read().decode(errors="replace")[:200]
        raise RunError(f"{server.key}={server.value!r}: {path} answered HTTP {err.code} {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise RunError(f"{server.key}={server.value!r}: {url}: {reason}") from None
