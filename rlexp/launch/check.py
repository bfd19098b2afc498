"""Validate a rendered JobSet before it leaves the machine: CRD schema (strict) plus the rules the API server,
the JobSet webhook and the Job controller would enforce only later (or never, for slice-shape mistakes).

The schema is the JobSet v0.12.0 CRD's openAPIV3Schema. The API server silently prunes unknown fields, so
this check forbids them instead: a misspelt key fails here rather than vanishing on the cluster.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
from pathlib import Path

from rlexp.errors import RlexpError
from rlexp.launch.names import DNS_1035, MAX_NAME
from rlexp.launch.settings import SECRET_KEYS
from rlexp.launch.slices import TpuSlice

SCHEMA_PATH = Path(__file__).parent / "schemas" / "jobset.v1alpha2.openAPIV3Schema.v0.12.0.json.gz"
DNS_LABEL_MAX = 63
METADATA_KEYS = {"name", "namespace", "labels", "annotations"}


class ManifestError(RlexpError):
    """A rendered manifest the cluster would reject (or silently misread)."""


def _strict(node: object) -> None:
    """Forbid fields the schema does not declare (in place)."""
    if isinstance(node, dict):
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for v in node.values():
            _strict(v)
    elif isinstance(node, list):
        for v in node:
            _strict(v)


@functools.cache
def _validator() -> object:
    import jsonschema

    schema = json.loads(gzip.open(SCHEMA_PATH).read())
    strict = copy.deepcopy(schema)
    _strict(strict)
    cls = jsonschema.validators.validator_for(strict, default=jsonschema.Draft7Validator)
    return cls(strict)


def schema_errors(jobset: dict) -> list[str]:
    """Every CRD-schema violation, as `path: message`."""
    errors = []
    for e in _validator().iter_errors(jobset):  # type: ignore[attr-defined]
        path = ".".join(str(p) for p in e.absolute_path) or "<root>"
        errors.append(f"{path}: {e.message}")
    extra = set(jobset.get("metadata", {})) - METADATA_KEYS
    if extra:
        errors.append(f"metadata: unexpected fields {sorted(extra)}")
    return errors


def _pods(jobset: dict) -> list[tuple[str, dict, dict]]:
    return [
        (rj["name"], rj["template"]["spec"], rj["template"]["spec"]["template"]["spec"])
        for rj in jobset["spec"]["replicatedJobs"]
    ]


def rule_errors(jobset: dict, tpu: TpuSlice | None = None, num_slices: int = 1) -> list[str]:
    """Structural rules: names and label lengths, coordinator, Job/pod semantics, slice shape, secrets."""
    errs: list[str] = []
    name = jobset["metadata"]["name"]
    spec = jobset["spec"]
    if len(name) > MAX_NAME or not DNS_1035.match(name):
        errs.append(f"metadata.name {name!r}: must match {DNS_1035.pattern} and be <= {MAX_NAME} characters")
    rjobs = {rj["name"]: rj for rj in spec["replicatedJobs"]}
    coord = spec.get("coordinator")
    if coord:
        rj = rjobs.get(coord["replicatedJob"])
        if rj is None:
            errs.append(f"spec.coordinator.replicatedJob {coord['replicatedJob']!r}: no such replicatedJob")
        label = f"{name}-{coord['replicatedJob']}-{coord.get('jobIndex', 0)}-{coord.get('podIndex', 0)}.{name}"
        if len(label) > DNS_LABEL_MAX:
            errs.append(f"coordinator label {label!r} is {len(label)} > {DNS_LABEL_MAX} characters")
    if spec.get("startupPolicy", {}).get("startupPolicyOrder") == "InOrder" and any(
        "dependsOn" in r for r in rjobs.values()
    ):
        errs.append("spec.startupPolicy: InOrder cannot be combined with dependsOn")
    for i, rule in enumerate(spec.get("failurePolicy", {}).get("rules", [])):
        if not rule.get("name"):
            errs.append(f"spec.failurePolicy.rules[{i}].name: required")
    tpu_chips = 0
    for rj_name, job, pod in _pods(jobset):
        job_name = f"{name}-{rj_name}-{rjobs[rj_name]['replicas'] - 1}"
        if len(job_name) > DNS_LABEL_MAX:
            errs.append(f"Job name {job_name!r} is longer than {DNS_LABEL_MAX}")
        where = f"replicatedJobs[{rj_name}]"
        restart = pod.get("restartPolicy", "OnFailure")
        if restart not in ("Never", "OnFailure"):
            errs.append(f"{where}: pod restartPolicy {restart!r} must be Never or OnFailure")
        if "podFailurePolicy" in job and restart != "Never":
            errs.append(f"{where}: podFailurePolicy needs pod restartPolicy Never")
        if job.get("completions") != job.get("parallelism"):
            errs.append(f"{where}: completions {job.get('completions')} != parallelism {job.get('parallelism')}")
        if "template" in rjobs[rj_name] and "annotations" in job["template"].get("metadata", {}):
            if "alpha.jobset.sigs.k8s.io/exclusive-topology" in job["template"]["metadata"]["annotations"]:
                errs.append(f"{where}: exclusive-topology belongs on the JobSet or replicatedJob, not the pod template")
        for c in pod.get("initContainers", []) + pod["containers"]:
            _check_container(c, f"{where}.{c['name']}", errs)
            tpus = c.get("resources", {}).get("limits", {}).get("google.com/tpu")
            if tpus is not None:
                tpu_chips += int(tpus) * job["completions"] * rjobs[rj_name]["replicas"]
                sel = pod.get("nodeSelector", {})
                if tpu is not None:
                    if int(tpus) != tpu.chips_per_vm:
                        errs.append(f"{where}: {tpus} TPUs per pod, slice {tpu.name} has {tpu.chips_per_vm} per VM")
                    if job["completions"] != tpu.vms:
                        errs.append(f"{where}: {job['completions']} pods per slice, slice {tpu.name} has {tpu.vms} VMs")
                    if sel.get("cloud.google.com/gke-tpu-accelerator") != tpu.accelerator:
                        errs.append(f"{where}: accelerator selector must be {tpu.accelerator}")
                    if sel.get("cloud.google.com/gke-tpu-topology") != tpu.topology:
                        errs.append(f"{where}: topology selector must be {tpu.topology}")
            if c["name"] == "pathways-rm" and tpu is not None:
                if f"--instance_type={tpu.instance_type}" not in c.get("args", []):
                    errs.append(f"{where}: resource manager needs --instance_type={tpu.instance_type}")
                if f"--instance_count={num_slices}" not in c.get("args", []):
                    errs.append(f"{where}: resource manager needs --instance_count={num_slices}")
    if tpu is not None and tpu_chips != tpu.chips * num_slices:
        errs.append(f"TPU chips requested ({tpu_chips}) != slice chips ({tpu.chips} x {num_slices} slices)")
    return errs


def _check_container(c: dict, where: str, errs: list[str]) -> None:
    for e in c.get("env", []):
        if e["name"] in SECRET_KEYS and "value" in e:
            errs.append(f"{where}: {e['name']} must come from a secretKeyRef, not a literal value")
    if c.get("restartPolicy") not in (None, "Always"):
        errs.append(f"{where}: container restartPolicy may only be Always (native sidecar)")
    res = c.get("resources", {})
    for k, v in res.get("requests", {}).items():
        if "/" in k and res.get("limits", {}).get(k) != v:
            errs.append(f"{where}: extended resource {k} needs requests == limits")


def check_jobset(jobset: dict, tpu: TpuSlice | None = None, num_slices: int = 1) -> None:
    """Raise ManifestError listing every problem; return None for a manifest the cluster will accept."""
    errs = schema_errors(jobset)
    if not errs:
        errs = rule_errors(jobset, tpu, num_slices)
    if errs:
        name = jobset.get("metadata", {}).get("name", "?")
        raise ManifestError(
            f"JobSet {name} is invalid: " + "; ".join(errs[:5]) + (f" (+{len(errs) - 5} more)" if len(errs) > 5 else "")
        )
