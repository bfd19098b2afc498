"""A real container engine for the `env.image` tests: rootful Podman under the `docker` name, and an image of the
tests' own guessing game (tests/envs/guess_server.py) built offline, for no registry is reachable from the test
machines.

`engine_env(tmp)` writes what Podman needs here into `tmp`, never into /etc: a containers.conf (passed as
CONTAINERS_CONF) and a `docker` symlink to podman in a folder put first on PATH (the Docker CLI in /usr/local/bin
would shadow /usr/bin). The conf's reasons, each met on these machines (Firecracker VMs, cgroup v1+v2 hybrid, no
CAP_SYS_RESOURCE): Podman's default ulimits exceed the hard limits the runtime may not raise; crun refuses the
hybrid cgroups, runc does not; `rm -f` would wait 10 s before its SIGKILL without stop_timeout=0.

`guess_image(env, tmp)` builds IMAGE FROM scratch, at the paths they have here: the venv's base interpreter, the
standard library, and of the venv and the machine's shared libraries only what the server touched while serving
one episode through rlexp's own client (under this interpreter, on loopback, traced by strace: modules, their
compiled code, data read by Python or C, folders listed), with what `ldd` says each library needs. OpenEnv's
server package imports gradio, pandas and pyarrow, hence ~360 MB. The image is rebuilt only when what it is made
of changed (its label `rlexp.source`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

from tests.envs.guess import SERVER, free_port
from tests.helpers import rlexp_env

IMAGE = "localhost/rlexp-guess:test"
GAME = [Path(SERVER), Path(SERVER).with_name("guess.py")]
MISSING = "podman or strace is not installed: run scripts/install_system_deps.sh (env.image's tests need a real engine)"
# the environment the server has in the container (none of this machine's, such as SSL_CERT_FILE, which would
# spare it reading certifi's bundle here)
_CONTAINER_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
# standard-library folders no server needs
_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages", "__pycache__"}

# Drives one episode through rlexp's own client (a WebSocket session: reset, a step), as a run does.
_EXERCISE = """import sys
from types import SimpleNamespace
from rlexp.envs.openenv_client import describe, one_step, run
from rlexp.envs.openenv_server import Spec
live = describe(Spec(name="guess", key="env", url=sys.argv[1]), SimpleNamespace(start_timeout_s=120, timeout_s=30))
run(one_step(live, "train", 0, "5"), 60)
"""


def engine_env(tmp: Path) -> dict[str, str]:
    """os.environ with Podman as `docker` (first on PATH) and its configuration from `tmp` (CONTAINERS_CONF); the
    test fails in one line where podman is not installed."""
    podman = shutil.which("podman")
    assert podman and shutil.which("strace"), MISSING
    tmp.mkdir(parents=True, exist_ok=True)
    nofile = min(_hard(resource.RLIMIT_NOFILE), 1048576)
    nproc = min(_hard(resource.RLIMIT_NPROC), 32768)  # conmon and runc run with 32768 here
    conf = tmp / "containers.conf"
    conf.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
        f'events_logfile_path = "{tmp / "events.log"}"\nstop_timeout = 0\n'
        '[network]\nnetwork_backend = "netavark"\n'
    )
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "docker").is_symlink():
        (bin_dir / "docker").symlink_to(podman)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CONTAINERS_CONF": str(conf)}


def _hard(limit: int) -> int:
    hard = resource.getrlimit(limit)[1]
    return sys.maxsize if hard == resource.RLIM_INFINITY else hard


def podman(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    """`podman <args>`'s output; the test fails with its stderr where it fails."""
    proc = subprocess.run(["podman", *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"podman {' '.join(args)}: {proc.stderr.strip()[-2000:]}"
    return proc.stdout


def guess_image(env: dict[str, str], tmp: Path) -> str:
    """IMAGE, built in `tmp` unless one made of the same sources is there already."""
    source = _source()
    have = subprocess.run(
        ["podman", "image", "inspect", "--format", '{{ index .Config.Labels "rlexp.source" }}', IMAGE],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if have.returncode == 0 and have.stdout.strip() == source:
        return IMAGE
    if have.returncode == 0:  # made of older sources: not left behind as a nameless image
        podman(env, "rmi", IMAGE)
    tmp.mkdir(parents=True, exist_ok=True)
    files, folders = _rootfs(_touched(tmp))
    with tarfile.open(tmp / "rootfs.tar", "w", dereference=True) as tar:
        for folder in sorted(folders):  # listed: there, even where none of its files was read
            _add_dir(tar, folder.lstrip("/"), 0o755)
        for path in sorted(files):  # same absolute paths as here: rpaths and the venv's pyvenv.cfg still hold
            tar.add(path, arcname=path.lstrip("/"), recursive=False)
        link = tarfile.TarInfo(sys.executable.lstrip("/"))  # the venv's python, a link to the base interpreter
        link.type, link.linkname = tarfile.SYMTYPE, os.path.realpath(sys.executable)
        tar.addfile(link)
        for game in GAME:
            tar.add(game, arcname=f"app/{game.name}")
        _add_dir(tar, "tmp", 0o1777)
        _add_text(tar, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
        _add_text(tar, "etc/group", "root:x:0:\n")
    cmd = [sys.executable, f"/app/{Path(SERVER).name}", "--host", "0.0.0.0", "--port", "8000"]
    (tmp / "Containerfile").write_text(
        f"FROM scratch\nADD rootfs.tar /\nLABEL rlexp.source={source}\nWORKDIR /app\nEXPOSE 8000\n"
        f"CMD {json.dumps(cmd)}\n"
    )
    podman(env, "build", "-q", "-t", IMAGE, "-f", str(tmp / "Containerfile"), str(tmp), timeout=300)
    (tmp / "rootfs.tar").unlink()  # the engine has its copy; pytest keeps its last sessions' folders
    return IMAGE


def _source() -> str:
    """What the image is made of: the game's code, this helper, the interpreter, the OpenEnv installed."""
    digest = hashlib.sha256(sys.version.encode() + sys.prefix.encode())
    for path in (*GAME, Path(__file__)):
        digest.update(path.read_bytes())
    digest.update(importlib.metadata.version("openenv").encode())
    return digest.hexdigest()[:16]


def _touched(tmp: Path) -> set[str]:
    """Every path the game's server touched (opened, listed, looked for), traced by strace while it served one
    episode on loopback under this interpreter, until SIGTERM stopped it."""
    trace, port = tmp / "trace.txt", free_port()
    server = subprocess.Popen(
        ["strace", "-f", "-qq", "-e", "trace=%file", "-o", str(trace), sys.executable, SERVER, "--port", str(port)],
        cwd=Path(SERVER).parent, env=_CONTAINER_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        played = subprocess.run(
            [sys.executable, "-c", _EXERCISE, f"http://127.0.0.1:{port}"], env=rlexp_env(), capture_output=True,
            text=True, timeout=300, check=False,
        )  # fmt: skip
        assert played.returncode == 0, f"an episode of the game failed: {played.stderr[-2000:]}"
    finally:
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
        for pid in children.read_text().split() if children.exists() else []:  # the server, not strace
            os.kill(int(pid), signal.SIGTERM)
        server.communicate(timeout=60)
    cwd = Path(SERVER).parent
    return {
        os.path.normpath(cwd / p)
        for p in re.findall(r'^\d+ +\w+\((?:AT_FDCWD, |\d+, )?"([^"]+)"', trace.read_text(), re.M)
    }


def _rootfs(touched: set[str]) -> tuple[set[str], set[str]]:
    """Absolute paths of the image's files and folders: the interpreter, the standard library, and what the
    server touched of the venv's and the base interpreter's trees and of the shared libraries (with what `ldd`
    says each library needs)."""
    stdlib, site = Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])
    exe = os.path.realpath(sys.executable)
    files, folders = {exe, os.path.join(sys.prefix, "pyvenv.cfg")}, set()
    for root, dirs, names in os.walk(stdlib):
        dirs[:] = [d for d in dirs if d not in _SKIP and not d.startswith("config-")]
        files.update(os.path.join(root, n) for n in names)
    for path in touched:
        if not path.startswith((sys.prefix + "/", sys.base_prefix + "/")) and not _shared(path):
            continue  # of the rest of the machine, only the shared libraries it loaded
        name = os.path.basename(path)
        if os.path.dirname(path) == str(site) and (
            name.endswith(".pth") or name.startswith(("sitecustomize", "__editable__"))
        ):
            continue  # rlexp's own hooks here: the editable install's finder, the profiler's sitecustomize
        if os.path.isfile(path):
            files.add(path)
        elif os.path.isdir(path) and path.startswith(sys.prefix):
            folders.add(path)
    return files | _libraries([exe, *filter(_shared, files)]), folders


def _shared(path: str) -> bool:
    """A shared library (libarrow.so.2600 too)."""
    return re.search(r"\.so(\.\d+)*$", path) is not None and not path.startswith(("/proc/", "/sys/", "/dev/"))


def _libraries(binaries: list[str]) -> set[str]:
    """The shared libraries `binaries` load (ldd's resolved paths, the dynamic loader's included)."""
    out = subprocess.run(["ldd", *binaries], capture_output=True, text=True, check=False).stdout
    return {os.path.normpath(p) for p in re.findall(r"(/\S+\.so[^\s:]*) \(0x", out) if os.path.isfile(p)}


def _add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, int(time.time())
    tar.addfile(info)


def _add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))
