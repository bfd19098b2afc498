"""Render one JobSet (`jobset.x-k8s.io/v1alpha2`) per job: Pathways (head + workers) or multi-controller JAX.

The Pathways layout follows xpk's `workload create-pathways` rendering: a `pathways-head` job on the CPU node
pool (proxy and resource manager as native sidecars, the rlexp container as the main container) and a
`worker` job with one pod per TPU VM. Plain dicts in, plain dicts out; no Kubernetes client needed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from rlexp.config.hardware import TpuSlice
from rlexp.config.launcher import PATHWAYS_IMAGES, GkeLauncherConf
from rlexp.errors import ConfigError
from rlexp.train.distributed import IN_CLUSTER_ENV
from rlexp.train.plan import PLAN_ENV

API_VERSION = "jobset.x-k8s.io/v1alpha2"
COMMAND = ["python", "-m", "rlexp"]  # the image's ENTRYPOINT (Dockerfile); exec form, never a shell string
CONTAINER = "rlexp"
HEAD_JOB = "pathways-head"
WORKER_JOB = "worker"
SLICE_JOB = "slice-job"
PROXY_PORT, RM_PORT, WORKER_PORT = 29000, 29001, 29005
JAX_COORDINATOR_PORT = 8476
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
SPEC_HASH = "rlexp.dev/spec-hash"
# Exit codes that restart the JobSet (preemption 143, SIGKILL 137, 42 = asked to restart); others fail it.
RESTART_EXIT_CODES = [42, *range(127, 256)]


@dataclass
class JobSpec:
    """One job of a sweep, ready to render."""

    name: str
    slice: TpuSlice
    num_slices: int
    args: list[str]  # `python -m rlexp` arguments (the job's overrides)
    output_dir: str
    run_name: str
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # trainer.rollout.env; hydra.launcher.env wins on a clash
    plan: str | None = None  # the submitter's plan as JSON (rlexp.train.plan): the pod replays it
    sidecars: list[dict] = field(default_factory=list)  # native sidecars of the rlexp pod (launch.env_sidecar)


def _field_env(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _label_env(name: str, label: str) -> dict:
    return _field_env(name, f"metadata.labels['{label}']")


def _annotation_env(name: str, annotation: str) -> dict:
    return _field_env(name, f"metadata.annotations['{annotation}']")


def secret_env(conf: GkeLauncherConf) -> list[dict]:
    """Secrets as references into a Kubernetes Secret; optional so a missing WANDB key does not block the pod."""
    return [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": conf.secret_name, "key": k, "optional": True}}}
        for k in conf.secret_keys
    ]


def escape_args(args: list[str]) -> list[str]:
    """Kubernetes expands `$(VAR)` in command/args; `$$(` keeps a literal `$(` in an override."""
    return [a.replace("$(", "$$(") for a in args]


def _rlexp_container(spec: JobSpec, conf: GkeLauncherConf, env: list[dict], resources: dict) -> dict:
    env = [
        *env,
        {"name": IN_CLUSTER_ENV, "value": "gke"},
        {"name": "RLEXP_JOB_NAME", "value": spec.name},
        {"name": "RLEXP_OUTPUT_DIR", "value": spec.output_dir},
        *([{"name": PLAN_ENV, "value": spec.plan.replace("$(", "$$(")}] if spec.plan else []),
        *({"name": k, "value": str(v)} for k, v in sorted({**spec.env, **conf.env}.items())),
        *secret_env(conf),
    ]
    return {
        "name": CONTAINER,
        "image": conf.image,
        "imagePullPolicy": conf.image_pull_policy,
        "command": list(COMMAND),
        "args": escape_args(spec.args),
        "env": env,
        "resources": resources,
    }


def _metadata(spec: JobSpec, conf: GkeLauncherConf) -> dict:
    labels = {
        "kueue.x-k8s.io/queue-name": conf.queue,
        # both tools' workload labels: `kubectl get jobset -l gcluster.google.com/workload=<name>` (the seeds'
        # monitoring command) and xpk's finds it
        "xpk.google.com/workload": spec.name,
        "gcluster.google.com/workload": spec.name,
        "app.kubernetes.io/managed-by": "rlexp",
        **spec.labels,
    }
    if conf.kueue_priority_class:
        labels["kueue.x-k8s.io/priority-class"] = conf.kueue_priority_class
    return {"name": spec.name, "namespace": conf.namespace, "labels": labels}


def _pod_common(conf: GkeLauncherConf) -> dict:
    pod: dict = {"terminationGracePeriodSeconds": conf.termination_grace_period_s}
    if conf.service_account:
        pod["serviceAccountName"] = conf.service_account
    return pod


def _tpu_pod(spec: JobSpec, conf: GkeLauncherConf) -> dict:
    pod = {
        **_pod_common(conf),
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": {
            "cloud.google.com/gke-tpu-accelerator": spec.slice.accelerator,
            "cloud.google.com/gke-tpu-topology": spec.slice.topology,
        },
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if conf.priority_class:
        pod["priorityClassName"] = conf.priority_class
    return pod


def _images(conf: GkeLauncherConf) -> tuple[str, str, str]:
    proxy = conf.proxy_image or f"{PATHWAYS_IMAGES}/proxy_server:{conf.pathways_version}"
    server = conf.server_image or f"{PATHWAYS_IMAGES}/server:{conf.pathways_version}"
    return proxy, server, conf.worker_image or server


def proxy_flags(conf: GkeLauncherConf) -> list[str]:
    """`hydra.launcher.proxy_xla_flags` as proxy args: one `--flag=value` per element (a leading `--` is added)."""
    out = []
    for flag in conf.proxy_xla_flags:
        text = str(flag).strip()
        if not text or any(c.isspace() for c in text) or "$(" in text:
            # xpk split such strings on spaces; here one element is one argument, so a space is a mistake
            raise ConfigError(
                "hydra.launcher.proxy_xla_flags",
                flag,
                "give one flag per list element, e.g. [--xla_foo=1, --xla_bar=2]",
            )
        out.append(text if text.startswith("--") else f"--{text}")
    return out


def render_pathways(spec: JobSpec, conf: GkeLauncherConf) -> dict:
    """Single-controller JAX through Pathways: the rlexp container on the CPU head drives every TPU VM."""
    proxy_image, server_image, worker_image = _images(conf)
    scratch = f"--gcs_scratch_location={scratch_location(conf)}"
    rm_address = f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}"
    head_env = _label_env("PATHWAYS_HEAD", COORDINATOR_LABEL)
    proxy = {
        "name": "pathways-proxy",
        "image": proxy_image,
        "restartPolicy": "Always",  # native sidecar: starts before and outlives nothing but the main container
        "args": [f"--server_port={PROXY_PORT}", rm_address, scratch, *proxy_flags(conf)],
        "env": [head_env, {"name": "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS", "value": "true"}],
        "ports": [{"containerPort": PROXY_PORT}],
        "resources": {"limits": {"cpu": "16", "memory": "100G"}},
    }
    rm = {
        "name": "pathways-rm",
        "image": server_image,
        "restartPolicy": "Always",
        "args": [
            f"--server_port={RM_PORT}",
            scratch,
            "--node_type=resource_manager",
            f"--instance_count={spec.num_slices}",
            f"--instance_type={spec.slice.instance_type}",
        ],
        "env": [
            _annotation_env("REPLICATED_JOB_NAME", "jobset.sigs.k8s.io/replicatedjob-name"),
            _annotation_env("JOBSET_NAME", "jobset.sigs.k8s.io/jobset-name"),
            _label_env("HOST_ADDRESS", COORDINATOR_LABEL),
            {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
        ],
        "ports": [{"containerPort": RM_PORT}, {"containerPort": RM_PORT + 1}],
        "resources": {"limits": {"cpu": "8", "memory": "32G"}},
    }
    user_env = [
        head_env,
        {"name": "JAX_PLATFORMS", "value": "proxy"},
        {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
        {"name": "JAX_BACKEND_TARGET", "value": f"grpc://$(PATHWAYS_HEAD):{PROXY_PORT}"},
        {"name": "RLEXP_PATHWAYS", "value": "1"},
    ]
    user = _rlexp_container(spec, conf, user_env, {"limits": {"cpu": "24", "memory": "100G"}})
    user["volumeMounts"] = [{"name": "shared-tmp", "mountPath": "/tmp"}]
    head_pod = {
        **_pod_common(conf),
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": {"cloud.google.com/gke-nodepool": conf.head_nodepool},
        "restartPolicy": "Never",
        "initContainers": [proxy, rm, *spec.sidecars],
        "containers": [user],
        "volumes": [{"name": "shared-tmp", "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}],
    }
    worker = {
        "name": "pathways-worker",
        "image": worker_image,
        "args": [f"--server_port={WORKER_PORT}", rm_address, scratch],
        "env": [
            {"name": "TPU_MIN_LOG_LEVEL", "value": "0"},
            {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "0"},
            {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
            {"name": "MEGASCALE_GRPC_ENABLE_XOR_TRACER", "value": "false"},
            _label_env("MEGASCALE_NUM_SLICES", "jobset.sigs.k8s.io/replicatedjob-replicas"),
            _annotation_env("JOBSET_NAME", "jobset.sigs.k8s.io/jobset-name"),
            _annotation_env("REPLICATED_JOB_NAME", "jobset.sigs.k8s.io/replicatedjob-name"),
            _label_env("MEGASCALE_SLICE_ID", "jobset.sigs.k8s.io/job-index"),
            head_env,
            _label_env("MEGASCALE_COORDINATOR_ADDRESS", COORDINATOR_LABEL),
        ],
        "ports": [{"containerPort": p} for p in (WORKER_PORT, WORKER_PORT + 1, 8471, 8080)],
        "resources": {"limits": {"google.com/tpu": str(spec.slice.chips_per_vm)}},
    }
    worker_pod = {**_tpu_pod(spec, conf), "restartPolicy": "OnFailure", "containers": [worker]}
    vms = spec.slice.vms
    jobset = {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": _metadata(spec, conf),
        "spec": {
            "coordinator": {"replicatedJob": HEAD_JOB, "jobIndex": 0, "podIndex": 0},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"restartStrategy": "Recreate", "maxRestarts": conf.max_restarts},
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_JOB]},
            "replicatedJobs": [
                {
                    "name": HEAD_JOB,
                    "replicas": 1,
                    "template": {
                        "metadata": {"annotations": {EXCLUSIVE: "kubernetes.io/hostname"}},
                        "spec": {
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "completions": 1,
                            "parallelism": 1,
                            "template": {
                                "metadata": {
                                    "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
                                },
                                "spec": head_pod,
                            },
                        },
                    },
                },
                {
                    "name": WORKER_JOB,
                    "replicas": spec.num_slices,
                    "template": {
                        "metadata": {"annotations": {EXCLUSIVE: "cloud.google.com/gke-nodepool"}},
                        "spec": {
                            "backoffLimit": 4 * vms,
                            "completionMode": "Indexed",
                            "completions": vms,
                            "parallelism": vms,
                            "template": {"spec": worker_pod},
                        },
                    },
                },
            ],
        },
    }
    _ttl(jobset, conf)
    return jobset


def render_multicontroller(spec: JobSpec, conf: GkeLauncherConf) -> dict:
    """Multi-controller JAX: one rlexp process per TPU VM, `jax.distributed` from the env vars set here."""
    vms = spec.slice.vms
    env = [
        _annotation_env("JOBSET_NAME", "jobset.sigs.k8s.io/jobset-name"),
        _annotation_env("REPLICATED_JOB_NAME", "jobset.sigs.k8s.io/replicatedjob-name"),
        {"name": "JAX_COORDINATOR_ADDRESS", "value": "$(JOBSET_NAME)-$(REPLICATED_JOB_NAME)-0-0.$(JOBSET_NAME)"},
        {"name": "JAX_COORDINATOR_PORT", "value": str(JAX_COORDINATOR_PORT)},
        {"name": "JAX_PROCESS_COUNT", "value": str(vms)},
        _annotation_env("JAX_PROCESS_ID", "batch.kubernetes.io/job-completion-index"),
        {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
    ]
    user = _rlexp_container(spec, conf, env, {"limits": {"google.com/tpu": str(spec.slice.chips_per_vm)}})
    user["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    pod = {
        **_tpu_pod(spec, conf),
        "restartPolicy": "Never",  # required by podFailurePolicy
        **({"initContainers": list(spec.sidecars)} if spec.sidecars else {}),
        "containers": [user],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    metadata = _metadata(spec, conf)
    metadata["annotations"] = {EXCLUSIVE: "cloud.google.com/gke-nodepool"}
    jobset = {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "coordinator": {"replicatedJob": SLICE_JOB, "jobIndex": 0, "podIndex": 0},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {
                "maxRestarts": conf.max_restarts,
                "rules": [
                    {
                        "name": "fail-on-program-error",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "replicatedJobs": [
                {
                    "name": SLICE_JOB,
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "completions": vms,
                            "parallelism": vms,
                            "podFailurePolicy": {
                                "rules": [
                                    {
                                        "action": "FailJob",
                                        "onExitCodes": {
                                            "containerName": CONTAINER,
                                            "operator": "NotIn",
                                            "values": RESTART_EXIT_CODES,
                                        },
                                    }
                                ]
                            },
                            "template": {"spec": pod},
                        }
                    },
                }
            ],
        },
    }
    _ttl(jobset, conf)
    return jobset


def _ttl(jobset: dict, conf: GkeLauncherConf) -> None:
    if conf.ttl_after_finished_s is not None:
        jobset["spec"]["ttlSecondsAfterFinished"] = conf.ttl_after_finished_s


def scratch_location(conf: GkeLauncherConf) -> str:
    if conf.gcs_scratch:
        return conf.gcs_scratch
    return f"{(conf.output_root or PLACEHOLDER_ROOT).rstrip('/')}/pathways-scratch"


PLACEHOLDER_ROOT = "gs://your-bucket/rlexp"  # dry runs without hydra.launcher.output_root


def spec_hash(jobset: dict) -> str:
    """A fingerprint of everything the JobSet runs (its manifest without this annotation)."""
    metadata = dict(jobset["metadata"])  # copies along the path to the annotation only: a sweep hashes every job
    if "annotations" in metadata:
        metadata["annotations"] = {k: v for k, v in metadata["annotations"].items() if k != SPEC_HASH}
    body = {**jobset, "metadata": metadata}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def render(spec: JobSpec, conf: GkeLauncherConf) -> dict:
    """The JobSet of one job, annotated with its `spec_hash`: a resubmission under a taken name compares it."""
    jobset = render_pathways(spec, conf) if conf.pathways else render_multicontroller(spec, conf)
    jobset["metadata"].setdefault("annotations", {})[SPEC_HASH] = spec_hash(jobset)
    return jobset
