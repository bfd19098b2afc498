"""Launcher and sweeper settings (`hydra.launcher.*`, `hydra.sweeper.*`), as dataclasses registered in Hydra's
ConfigStore by the plugins.

Kept free of heavy imports: Hydra imports every plugin at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PATHWAYS_IMAGES = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
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
    image: str = "${oc.env:RLEXP_IMAGE,rlexp:latest}"  # pin by digest for reproducible sweeps
    image_pull_policy: str = "IfNotPresent"
    service_account: str | None = None  # Kubernetes SA (Workload Identity for GCS)
    max_restarts: int = 0  # JobSet failurePolicy.maxRestarts
    output_root: str | None = "${oc.env:RLEXP_OUTPUT_ROOT,null}"  # gs://bucket/prefix; run dir = <root>/<job>
    gcs_scratch: str | None = None  # Pathways scratch; null: <output_root>/pathways-scratch
    secret_name: str = "rlexp-secrets"
    secret_keys: list[str] = field(default_factory=lambda: list(SECRET_KEYS))
    env: dict[str, str] = field(default_factory=dict)  # extra plain env vars (no secrets)
    head_nodepool: str = "cpu-np"
    pathways_version: str = "latest"  # tag of the Pathways proxy/server images
    proxy_image: str | None = None  # null: <PATHWAYS_IMAGES>/proxy_server:<version>
    server_image: str | None = None  # null: <PATHWAYS_IMAGES>/server:<version>
    worker_image: str | None = None  # null: server_image
    termination_grace_period_s: int = 60  # time for the SIGTERM checkpoint
    ttl_after_finished_s: int | None = None
    name_prefix: str | None = None  # null: derived from run_name
    preflight: bool = True
