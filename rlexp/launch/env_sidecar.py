"""env=openenv on remote launchers: a GKE pod serves `env.image` from a sidecar; a Slurm job runs it itself.

GKE: the image runs as a native sidecar of the pod whose rlexp container starts the episodes (Pathways: the head
pod; multi-controller: each TPU VM's pod): an initContainer with `restartPolicy: Always`, the form the Pathways
proxy and resource manager already take in these JobSets (JobSet v0.12.0's schema admits it; Kubernetes >= 1.29,
GKE's default since). It serves on SIDECAR_PORT, where OpenEnv's images listen (their uvicorn --port). Its
startupProbe (GET /health) holds the rlexp container back until the server answers, as a plain extra container
could not; its readinessProbe keeps saying whether it still does. The pod's own run reaches it at
http://127.0.0.1:SIDECAR_PORT: the launcher appends `env.image=null env.url=<that>` (per task under
`env.tasks.<name>`) to the pod's overrides and checks and plans the config those compose, so neither the
submitting machine nor the pod needs docker. The pods share the node's network (hostNetwork), so one image a run.

Slurm: nothing to render. `env.image` and `env.command` reach the job as given, and rlexp starts the server inside
the job as it does on a workstation (rlexp.envs.openenv_server): an image with the node's `docker` CLI (Docker, or
Podman under that name), checked where the sweep is submitted and again where the job starts, before any weights
load.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from rlexp.errors import ConfigError

SIDECAR_PORT = 8000  # OpenEnv's images serve here (rlexp.envs.openenv_server.IMAGE_PORT)
SIDECAR_URL = f"http://127.0.0.1:{SIDECAR_PORT}"
SIDECAR_NAME = "openenv-server"


@dataclass(frozen=True)
class Sidecar:
    """An image the pod serves: `key` is where the config names it (`env` or `env.tasks.<name>`)."""

    key: str
    task: str | None  # env.tasks' name, None for env.image itself
    image: str


def sidecars(env: Any) -> list[Sidecar]:
    """The images of an env=openenv config (`env`: EnvConfig, or its resolved dict); none for other kinds."""
    if isinstance(env, dict):
        env = SimpleNamespace(**env)
    if getattr(env, "kind", None) != "openenv":
        return []
    out = [Sidecar("env", None, env.image)] if env.image and not env.tasks else []
    for name, spec in (env.tasks or {}).items():
        if isinstance(spec, dict) and spec.get("image"):
            out.append(Sidecar(f"env.tasks.{name}", str(name), str(spec["image"])))
    return out


def _one(found: list[Sidecar]) -> Sidecar | None:
    if len(found) > 1:
        raise ConfigError(
            f"{found[1].key}.image",
            found[1].image,
            f"a GKE pod serves one image (port {SIDECAR_PORT} of the node's network): serve the others yourself "
            "and set their url, or give them an env.command",
        )
    return found[0] if found else None


def _changes(side: Sidecar, tasks: dict) -> dict[str, Any]:
    """The env fields that make the pod reach the sidecar instead of running the image."""
    if side.task is None:
        return {"image": None, "url": SIDECAR_URL}
    return {"tasks": {**tasks, side.task: {**tasks[side.task], "image": None, "url": SIDECAR_URL}}}


def pod_view(resolved: dict) -> tuple[dict, list[str], Sidecar | None]:
    """The job's resolved config as its pod composes it, the overrides that make the pod compose it, and the
    image its sidecar serves (None: nothing to serve; the config comes back as it was)."""
    side = _one(sidecars(resolved.get("env") or {}))
    if side is None:
        return resolved, [], None
    env = {**resolved["env"], **_changes(side, resolved["env"]["tasks"])}  # a copy: a sweep's jobs share sections
    args = [f"{side.key}.image=null", f"++{side.key}.url={SIDECAR_URL}"]  # ++: a task may have had no url
    return {**resolved, "env": env}, args, side


def pod_config(conf: Any) -> Any:
    """A typed config (RlexpConfig) as the pod will run it: a single run checks this one before its hand-off."""
    side = _one(sidecars(conf.env))
    if side is None:
        return conf
    return dataclasses.replace(conf, env=dataclasses.replace(conf.env, **_changes(side, conf.env.tasks)))


def container(side: Sidecar) -> dict:
    """The native sidecar serving `side.image` on SIDECAR_PORT, probed on /health."""
    probe = {"httpGet": {"path": "/health", "port": SIDECAR_PORT}}  # the pod's address: images serve on 0.0.0.0
    return {
        "name": SIDECAR_NAME,
        "image": side.image,
        "restartPolicy": "Always",  # native sidecar: up before the rlexp container, stopped after it
        "ports": [{"containerPort": SIDECAR_PORT}],
        # up to 10 min to pull and start; the rlexp container starts once it answers
        "startupProbe": {**probe, "periodSeconds": 5, "failureThreshold": 120},
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    }
