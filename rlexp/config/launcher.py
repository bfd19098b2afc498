"""Launcher and sweeper settings (`hydra.launcher.*`, `hydra.sweeper.*`), as dataclasses registered in Hydra's
ConfigStore by the plugins.

Kept free of heavy imports: Hydra imports every plugin at start-up.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

PATHWAYS_IMAGES = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
# The Pathways images the gemma4-e4b seed recipe pins (MaxText run_gemma4_e4b_rl.sh): a `:latest` tag changes
# under a sweep, so the defaults are these digests (server = resource manager and workers). Override to move on.
SEED_SERVER_IMAGE = f"{PATHWAYS_IMAGES}/server@sha256:d03068b39a8a2fab0621086ccb7c9445ce17ad34f1520159ca4ecd395346a162"
SEED_PROXY_IMAGE = (
    f"{PATHWAYS_IMAGES}/proxy_server@sha256:6342a3cae2818d2f887d396e9ae4156b3316f79fef186d71ff16d535b44e1724"
)
# XLA flags both MaxText RL seeds pass to the Pathways proxy (--custom-pathways-proxy-server-args). The seeds
# single-quote '${XLA_FLAGS}', so xpk received the literal string and the flags never reached the proxy; here
# each flag is one element of the proxy container's args.
SEED_PROXY_XLA_FLAGS = (
    "--xla_tpu_scoped_vmem_limit_kib=65536",
    "--xla_tpu_bf16_emission_mode=NATIVE_EMISSION",
    "--xla_tpu_enable_sparse_core_reduce_scatter_v2=true",
    "--xla_tpu_enable_sparse_core_collective_offload_all_gather=true",
    "--xla_tpu_enable_sparse_core_collective_offload_2d_all_gather=true",
    "--xla_tpu_enable_sparse_core_collective_offload_3d_all_gather=true",
    "--xla_tpu_enable_sparse_core_collective_offload_all_reduce=true",
    "--xla_tpu_enable_sparse_core_collective_offload_reduce_scatter=true",
    "--xla_tpu_enable_sparse_core_collective_offload_nd_reduce_scatter=true",
    "--xla_tpu_use_single_sparse_core_for_all_gather_offload=true",
    "--xla_tpu_use_tc_device_shape_on_sc=True",
    "--xla_sc_disable_megacore_partitioning=True",
    "--xla_enable_async_all_gather=true",
    "--xla_tpu_prefer_async_allgather_to_allreduce=true",
    "--xla_tpu_enable_latency_hiding_layer_scheduler=true",
    "--xla_tpu_scheduler_percent_shared_memory_limit=150",
    "--xla_tpu_enable_layer_scheduler_for_dependent_collectives=true",
    "--xla_tpu_enable_sparse_core_collective_aggregator=true",
)
PLACEHOLDER_IMAGE = "rlexp:latest"  # the default when RLEXP_IMAGE is unset: fine to dry-run, not to submit
# HF_TOKEN / WANDB_API_KEY reach pods only as secretKeyRef into this Kubernetes Secret.
SECRET_KEYS = ("HF_TOKEN", "WANDB_API_KEY")


@dataclass
class SweeperConf:
    """`hydra/sweeper=rlexp` (the default): Hydra's basic sweeper and its settings; batch validation composes
    each distinct group choice once (launchers/hydra_plugins/rlexp_launchers/sweeper.py)."""

    _target_: str = "hydra_plugins.rlexp_launchers.sweeper.BasicSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None


@dataclass
class GkeLauncherConf:
    """`hydra/launcher=gke`: one JobSet per job on a GKE cluster with TPU node pools (and Kueue)."""

    _target_: str = "hydra_plugins.rlexp_launchers.gke_launcher.GkeLauncher"
    dry_run: bool = False  # write <job dir>/jobset.yaml and print its path; no cluster needed
    wait: bool = False  # block until every JobSet is Completed/Failed (else return once submitted)
    poll_s: float = 30.0
    wait_timeout_s: float = 0.0  # 0: wait without limit
    admission_timeout_s: float = 0.0  # fail a JobSet still Pending (not admitted by Kueue) after this; 0: no limit
    pathways: bool = True  # false: multi-controller JAX (one process per TPU VM)
    context: str | None = None  # kubeconfig context; null: current context (or in-cluster config)
    namespace: str = "default"
    queue: str = "multislice-queue"  # Kueue LocalQueue (label kueue.x-k8s.io/queue-name)
    priority_class: str | None = "medium"  # pod priorityClassName of the TPU workers (as xpk)
    kueue_priority_class: str | None = None  # Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class)
    image: str = "${oc.env:RLEXP_IMAGE,rlexp:latest}"  # pin by digest; submitting the placeholder is refused
    image_pull_policy: str = "IfNotPresent"
    service_account: str | None = None  # Kubernetes SA (Workload Identity for GCS)
    max_restarts: int = 0  # JobSet failurePolicy.maxRestarts
    output_root: str | None = "${oc.env:RLEXP_OUTPUT_ROOT,null}"  # gs://bucket/prefix; run dir = <root>/<job>
    gcs_scratch: str | None = None  # Pathways scratch; null: <output_root>/pathways-scratch
    secret_name: str = "rlexp-secrets"
    secret_keys: list[str] = field(default_factory=lambda: list(SECRET_KEYS))
    env: dict[str, str] = field(default_factory=dict)  # extra plain env vars (no secrets)
    head_nodepool: str = "cpu-np"
    pathways_version: str = "latest"  # tag of the Pathways images whose key below is null
    proxy_image: str | None = SEED_PROXY_IMAGE  # null: <PATHWAYS_IMAGES>/proxy_server:<pathways_version>
    server_image: str | None = SEED_SERVER_IMAGE  # null: <PATHWAYS_IMAGES>/server:<pathways_version>
    worker_image: str | None = None  # null: server_image
    proxy_xla_flags: list[str] = field(default_factory=lambda: list(SEED_PROXY_XLA_FLAGS))  # proxy args
    termination_grace_period_s: int = 60  # time for the SIGTERM checkpoint
    ttl_after_finished_s: int | None = None
    name_prefix: str | None = None  # null: derived from run_name
    preflight: bool = True


# An OCI image reference, as container runtimes parse it: [host[:port]/]path[:tag][@algorithm:hex]; the path's
# components are lower-case alphanumerics joined by '.', '_', '__' or dashes.
_HOST = r"(?:\[[0-9A-Fa-f:]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*)"
_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PART}(?:/{_PART})*"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"
IMAGE_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@(?P<digest>{_DIGEST}))?")
IMAGE_FIX = "use <registry>/<repository>[:tag][@sha256:<64 hex digits>], the repository in lower case"


def check_image(key: str, image: str | None, env: str | None = None) -> None:
    """`image` must parse as an OCI image reference (a pod with another would never pull it); `env`: the variable
    the value came from, named in the error."""
    if image is None:
        return
    from rlexp.errors import ConfigError

    found = IMAGE_REFERENCE.fullmatch(image)
    digest = (found.group("digest") or "") if found else ""
    sha_ok = not digest.startswith("sha256:") or len(digest) == len("sha256:") + 64
    if found and len(found.group("name")) <= 255 and sha_ok:
        return
    origin = f" (set by env {env})" if env and os.environ.get(env) == image else ""
    what = "an empty name" if not image.strip() else "not an OCI image reference"
    raise ConfigError(key, image, f"{what}{origin}; {IMAGE_FIX}")


def check_settings(conf: GkeLauncherConf) -> None:
    """Values of `hydra.launcher` a JobSet would carry: counts >= 0, finite polling and timeouts, image references
    (RLEXP_IMAGE's too), a Kueue queue name."""
    import math

    from rlexp.errors import ConfigError

    check_image("hydra.launcher.image", conf.image, "RLEXP_IMAGE")  # a dry run too: its manifest would not start
    for name in ("proxy_image", "server_image", "worker_image"):
        check_image(f"hydra.launcher.{name}", getattr(conf, name))
    if not str(conf.queue or "").strip():  # an empty label value is valid YAML and Kubernetes: Kueue admits nothing
        raise ConfigError(
            "hydra.launcher.queue", conf.queue, "name the Kueue LocalQueue of the namespace (kubectl get localqueues)"
        )
    if conf.kueue_priority_class is not None and not conf.kueue_priority_class.strip():
        raise ConfigError(
            "hydra.launcher.kueue_priority_class",
            conf.kueue_priority_class,
            "name a WorkloadPriorityClass (kubectl get workloadpriorityclasses), or null for none",
        )

    for name in ("max_restarts", "termination_grace_period_s", "ttl_after_finished_s"):
        value = getattr(conf, name)
        if value is not None and value < 0:
            raise ConfigError(f"hydra.launcher.{name}", value, "use an integer >= 0")
    for name in ("poll_s", "wait_timeout_s", "admission_timeout_s"):
        value = getattr(conf, name)
        if not math.isfinite(value) or value < 0 or (name == "poll_s" and value == 0):
            raise ConfigError(
                f"hydra.launcher.{name}", value, f"use a number of seconds {'>' if name == 'poll_s' else '>='} 0"
            )
