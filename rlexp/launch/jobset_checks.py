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
import re
from pathlib import Path
from typing import Any

from rlexp.config.hardware import TpuSlice
from rlexp.config.launcher import SECRET_KEYS
from rlexp.errors import RlexpError
from rlexp.launch.names import DNS_1035, MAX_NAME

SCHEMA_PATH = Path(__file__).parent / "schemas" / "jobset.v1alpha2.openAPIV3Schema.v0.12.0.json.gz"
DNS_LABEL_MAX = 63
METADATA_KEYS = {"name", "namespace", "labels", "annotations"}
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
VAR_REF = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")  # $(VAR), not the escaped $$(VAR)


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


# Schema keywords whose outcome depends only on a node's keys, list lengths and value types (the manifest's
# shape) or that jsonschema does not assert (annotations; `format` without a format checker; x-kubernetes-*).
_SHAPE_KEYWORDS = {"type", "properties", "required", "items", "additionalProperties", "maxItems", "minItems"}
_SHAPE_KEYWORDS |= {"maxProperties", "minProperties", "description", "title", "default", "format", "nullable"}


class _ShapeCache:
    """CRD-schema validation of a sweep's manifests in the time of a few leaves each.

    The jobs of a sweep render manifests of one shape (keys, list lengths, value types) that differ in a few
    strings (name, args, output dir). Once a manifest passed the full validation, another of the same shape is
    valid when each subtree where they differ is: walking down from the root through schema nodes that only
    constrain shape, every differing leaf (or subtree under a node with value keywords) is validated against
    its own schema by the same validator. Anything else (another shape, a failed subtree) takes the full
    validation, which also words the errors."""

    def __init__(self) -> None:
        self.valid: list[Any] = []  # manifests that passed the full validation, the latest first
        self.subvalidators: dict[int, Any] = {}
        self.plain: dict[int, bool] = {}

    def is_valid(self, jobset: dict) -> bool:
        if not _decomposable():
            return False
        schema = _validator().schema  # type: ignore[attr-defined]
        return any(self._same_outcome(ref, jobset, schema) for ref in self.valid)

    def remember(self, jobset: dict) -> None:
        self.valid = [json.loads(json.dumps(jobset)), *self.valid[:7]]  # a copy: callers own their manifest

    def _is_plain(self, schema: dict) -> bool:
        if id(schema) not in self.plain:
            self.plain[id(schema)] = all(k in _SHAPE_KEYWORDS or k.startswith("x-kubernetes-") for k in schema)
        return self.plain[id(schema)]

    def _same_outcome(self, ref: Any, new: Any, schema: Any) -> bool:
        """Whether `new` validates against `schema` as `ref` (valid) does; False also when their shapes differ."""
        if ref == new or schema is True or schema == {}:
            return True
        if type(ref) is not type(new) or not isinstance(schema, dict):
            return False
        if isinstance(new, dict) and self._is_plain(schema):
            if new.keys() != ref.keys():
                return False
            props, extra = schema.get("properties", {}), schema.get("additionalProperties", True)
            for key, value in new.items():
                sub = props[key] if key in props else extra
                if value != ref[key] and not self._same_outcome(ref[key], value, sub):
                    return False
            return True
        if isinstance(new, list) and self._is_plain(schema) and isinstance(schema.get("items", {}), dict):
            if len(new) != len(ref):
                return False
            items = schema.get("items", {})
            return all(r == v or self._same_outcome(r, v, items) for r, v in zip(ref, new, strict=True))
        sub_validator = self.subvalidators.get(id(schema))
        if sub_validator is None:
            sub_validator = self.subvalidators[id(schema)] = _validator().evolve(schema=schema)  # type: ignore[attr-defined]
        return bool(sub_validator.is_valid(new))


@functools.cache
def _decomposable() -> bool:
    """False when formats are asserted or references resolve against the root: subtrees do not validate alone."""
    validator = _validator()
    return getattr(validator, "format_checker", None) is None and '"$ref"' not in json.dumps(validator.schema)  # type: ignore[attr-defined]


_SHAPES = _ShapeCache()


def schema_errors(jobset: dict) -> list[str]:
    """Every CRD-schema violation, as `path: message`."""
    errors = []
    if not _SHAPES.is_valid(jobset):
        for e in _validator().iter_errors(jobset):  # type: ignore[attr-defined]
            path = ".".join(str(p) for p in e.absolute_path) or "<root>"
            errors.append(f"{path}: {e.message}")
        if not errors:
            _SHAPES.remember(jobset)
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
    """Structural rules: names and label lengths, coordinator, Job/pod semantics, slice shape, env, secrets."""
    errs: list[str] = []
    name = jobset["metadata"]["name"]
    spec = jobset["spec"]
    if len(name) > MAX_NAME or not DNS_1035.match(name):
        errs.append(f"metadata.name {name!r}: must match {DNS_1035.pattern} and be <= {MAX_NAME} characters")
    for key, value in jobset["metadata"].get("labels", {}).items():
        if len(value) > DNS_LABEL_MAX or not LABEL_VALUE.match(value):
            errs.append(
                f"metadata.labels[{key}]={value!r}: label values are <= 63 of [A-Za-z0-9-_.], alphanumeric ends"
            )
    rjobs = {rj["name"]: rj for rj in spec["replicatedJobs"]}
    coord = spec.get("coordinator")
    if coord:
        if coord["replicatedJob"] not in rjobs:
            errs.append(f"spec.coordinator.replicatedJob {coord['replicatedJob']!r}: no such replicatedJob")
        label = f"{name}-{coord['replicatedJob']}-{coord.get('jobIndex', 0)}-{coord.get('podIndex', 0)}.{name}"
        if len(label) > DNS_LABEL_MAX:
            errs.append(f"coordinator label {label!r} is {len(label)} > {DNS_LABEL_MAX} characters")
    in_order = spec.get("startupPolicy", {}).get("startupPolicyOrder") == "InOrder"
    if in_order and any("dependsOn" in r for r in rjobs.values()):
        errs.append("spec.startupPolicy: InOrder cannot be combined with dependsOn")
    for i, rule in enumerate(spec.get("failurePolicy", {}).get("rules", [])):
        if not rule.get("name"):
            errs.append(f"spec.failurePolicy.rules[{i}].name: required")
    tpu_chips = 0
    for rj_name, job, pod in _pods(jobset):
        where = f"replicatedJobs[{rj_name}]"
        replicas = rjobs[rj_name]["replicas"]
        if len(f"{name}-{rj_name}-{replicas - 1}") > DNS_LABEL_MAX:
            errs.append(f"{where}: Job name {name}-{rj_name}-{replicas - 1} is longer than {DNS_LABEL_MAX}")
        errs += _job_rules(job, pod, where)
        for c in pod.get("initContainers", []) + pod["containers"]:
            errs += _container_rules(c, f"{where}.{c['name']}")
            tpus = c.get("resources", {}).get("limits", {}).get("google.com/tpu")
            if tpus is not None:
                tpu_chips += int(tpus) * job["completions"] * replicas
                if tpu is not None:
                    errs += _tpu_pod_rules(int(tpus), job, pod, tpu, where)
            if c["name"] == "pathways-rm" and tpu is not None:
                for arg in (f"--instance_type={tpu.instance_type}", f"--instance_count={num_slices}"):
                    if arg not in c.get("args", []):
                        errs.append(f"{where}: resource manager needs {arg}")
    if tpu is not None and tpu_chips != tpu.chips * num_slices:
        errs.append(f"TPU chips requested ({tpu_chips}) != slice chips ({tpu.chips} x {num_slices} slices)")
    return errs


def _job_rules(job: dict, pod: dict, where: str) -> list[str]:
    """What batch/v1 validates only when the JobSet controller creates the child Jobs (too late to see)."""
    errs = []
    restart = pod.get("restartPolicy", "OnFailure")
    if restart not in ("Never", "OnFailure"):
        errs.append(f"{where}: pod restartPolicy {restart!r} must be Never or OnFailure")
    if "podFailurePolicy" in job and restart != "Never":
        errs.append(f"{where}: podFailurePolicy needs pod restartPolicy Never")
    if job.get("completions") != job.get("parallelism"):
        errs.append(f"{where}: completions {job.get('completions')} != parallelism {job.get('parallelism')}")
    if EXCLUSIVE in job["template"].get("metadata", {}).get("annotations", {}):
        errs.append(f"{where}: exclusive-topology belongs on the JobSet or replicatedJob, not the pod template")
    return errs


def _tpu_pod_rules(tpus: int, job: dict, pod: dict, tpu: TpuSlice, where: str) -> list[str]:
    errs = []
    sel = pod.get("nodeSelector", {})
    if tpus != tpu.chips_per_vm:
        errs.append(f"{where}: {tpus} TPUs per pod, slice {tpu.name} has {tpu.chips_per_vm} per VM")
    if job["completions"] != tpu.vms:
        errs.append(f"{where}: {job['completions']} pods per slice, slice {tpu.name} has {tpu.vms} VMs")
    if sel.get("cloud.google.com/gke-tpu-accelerator") != tpu.accelerator:
        errs.append(f"{where}: accelerator selector must be {tpu.accelerator}")
    if sel.get("cloud.google.com/gke-tpu-topology") != tpu.topology:
        errs.append(f"{where}: topology selector must be {tpu.topology}")
    return errs


def _container_rules(c: dict, where: str) -> list[str]:
    errs = []
    defined: set[str] = set()
    for e in c.get("env", []):
        if e["name"] in SECRET_KEYS and "value" in e:
            errs.append(f"{where}: {e['name']} must come from a secretKeyRef, not a literal value")
        # Kubernetes leaves an undefined $(VAR) as literal text: a silent misconfiguration
        for ref in VAR_REF.findall(str(e.get("value", ""))):
            if ref not in defined:
                errs.append(f"{where}: env {e['name']} uses $({ref}) before it is defined")
        defined.add(e["name"])
    for arg in c.get("args", []):
        for ref in VAR_REF.findall(arg):
            if ref not in defined:
                errs.append(f"{where}: argument {arg!r} uses $({ref}), which the container's env does not define")
    if c.get("restartPolicy") not in (None, "Always"):
        errs.append(f"{where}: container restartPolicy may only be Always (native sidecar)")
    res = c.get("resources", {})
    for k, v in res.get("requests", {}).items():
        if "/" in k and res.get("limits", {}).get(k) != v:
            errs.append(f"{where}: extended resource {k} needs requests == limits")
    return errs


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
