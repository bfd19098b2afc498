"""The few Kubernetes calls rlexp makes, through the official `kubernetes` client.

Connection problems (no kubeconfig, unreachable API server, forbidden) become one-line `RlexpError`s that
name the context tried and how to render manifests without a cluster instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rlexp.errors import RlexpError

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
DRY_RUN_HINT = "to only render manifests add hydra.launcher.dry_run=true"
TIMEOUT = (5, 60)  # connect, read seconds


class ClusterError(RlexpError):
    """The cluster could not be reached or refused a request."""


@dataclass
class Cluster:
    """An API client bound to one kubeconfig context (or the in-cluster service account)."""

    api_client: Any
    context: str

    @property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client)

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    def _fail(self, err: BaseException, what: str) -> ClusterError:
        from kubernetes.client.exceptions import ApiException

        if isinstance(err, ApiException):
            if err.status in (401, 403):
                return ClusterError(
                    f"{what}: forbidden ({err.status} {err.reason}) in kube context '{self.context}'; "
                    f"check your credentials and RBAC for jobsets.jobset.x-k8s.io, or {DRY_RUN_HINT}"
                )
            return ClusterError(f"{what}: API error {err.status} {err.reason} in kube context '{self.context}'")
        host = getattr(self.api_client.configuration, "host", "?")
        return ClusterError(
            f"{what}: API server {host} of kube context '{self.context}' is unreachable "
            f"({type(err).__name__}); check the cluster/VPN, or {DRY_RUN_HINT}"
        )

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, _request_timeout=TIMEOUT, **kwargs)
        except ApiException as err:
            if err.status in (404, 409):  # not found / already exists: the caller decides
                raise
            raise self._fail(err, what) from None
        except OSError as err:  # urllib3 MaxRetryError/NewConnectionError derive from OSError
            raise self._fail(err, what) from None
        except Exception as err:
            if type(err).__module__.startswith("urllib3"):
                raise self._fail(err, what) from None
            raise

    def create_jobset(self, body: dict) -> bool:
        """Create the JobSet; False when one of that name exists already (it was submitted before)."""
        from kubernetes.client.exceptions import ApiException

        ns = body["metadata"]["namespace"]
        try:
            self._call(
                "submit " + body["metadata"]["name"],
                self.custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                PLURAL,
                body,
            )
        except ApiException as err:
            if err.status == 409:
                return False
            raise self._fail(err, "submit") from None
        return True

    def get_jobset(self, name: str, namespace: str) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._call(
                f"get {name}", self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
            )
        except ApiException:
            return None

    def list_jobsets(self, namespace: str, label_selector: str = "") -> dict[str, dict]:
        """The JobSets of a namespace (those matching `label_selector`), by name."""
        from kubernetes.client.exceptions import ApiException

        what = f"list jobsets in {namespace}"
        try:
            out = self._call(
                what, self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                label_selector=label_selector,
            )  # fmt: skip
        except ApiException as err:  # 404: the JobSet CRD is not installed in this cluster
            raise self._fail(err, what) from None
        return {o["metadata"]["name"]: o for o in out.get("items") or []}

    def delete_jobset(self, name: str, namespace: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self._call(
                f"cancel {name}",
                self.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                propagation_policy="Foreground",
            )
        except ApiException:
            return False
        return True

    def head_pod(self, name: str, namespace: str) -> str | None:
        """The pod whose `rlexp` container prints the run's log: Pathways head, or process 0."""
        sel = f"jobset.sigs.k8s.io/jobset-name={name}"
        pods = self._call(f"pods of {name}", self.core.list_namespaced_pod, namespace, label_selector=sel).items
        pods = [p for p in pods if any(c.name == "rlexp" for c in p.spec.containers)]
        pods.sort(key=lambda p: p.metadata.name)
        return pods[0].metadata.name if pods else None

    def stream_logs(self, pod: str, namespace: str, follow: bool = True) -> Iterator[bytes]:
        resp = self._call(
            f"logs of {pod}",
            self.core.read_namespaced_pod_log,
            pod,
            namespace,
            container="rlexp",
            follow=follow,
            _preload_content=False,
        )
        yield from resp.stream(4096)


def connect(context: str | None = None) -> Cluster:
    """Load the kubeconfig (current or named context), or the in-cluster config when running in a pod."""
    from kubernetes import client, config

    if context is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        try:
            config.load_incluster_config()
            return Cluster(client.ApiClient(), "in-cluster")
        except config.ConfigException:
            pass
    # read KUBECONFIG now: the client library reads it once, at import
    path = os.environ.get("KUBECONFIG", os.path.expanduser("~/.kube/config"))
    try:
        _contexts, active = config.list_kube_config_contexts(config_file=path)
        name = context or active["name"]
        configuration = client.Configuration()
        config.load_kube_config(config_file=path, context=name, client_configuration=configuration)
    except (config.ConfigException, FileNotFoundError, OSError, TypeError, KeyError) as err:
        tried = f"context '{context}'" if context else "the current context"
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ClusterError(f"no usable kubeconfig ({path}, {tried}): {reason}; {DRY_RUN_HINT}") from None
    configuration.retries = 1  # fail fast: a dead API server should not hang a sweep for minutes
    return Cluster(client.ApiClient(configuration), name)


def jobset_state(obj: dict | None) -> str:
    """Pending | Running | Suspended | Completed | Failed | NotFound, from the JobSet's status."""
    if obj is None:
        return "NotFound"
    status = obj.get("status") or {}
    terminal = status.get("terminalState")
    if terminal in ("Completed", "Failed"):
        return terminal
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    for t in ("Failed", "Completed", "Suspended"):
        if conds.get(t) == "True":
            return t
    if obj.get("spec", {}).get("suspend"):
        return "Suspended"
    active = sum(r.get("active", 0) + r.get("ready", 0) for r in status.get("replicatedJobsStatus") or [])
    return "Running" if active else "Pending"
