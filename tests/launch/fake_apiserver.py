"""A small Kubernetes API server on loopback: the JobSet and Pod endpoints rlexp's client calls.

It speaks real HTTP to the real `kubernetes` client (through a generated kubeconfig), keeps objects in
memory, answers 409 on duplicate names and 404 on missing ones like the API server does, creates the head
pod a JobSet controller would, serves its log, and can refuse everything with 403.
"""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

JOBSETS = re.compile(r"^/apis/jobset\.x-k8s\.io/v1alpha2/namespaces/([^/]+)/jobsets(?:/([^/]+))?$")
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/log)?$")


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


def _selector(query: dict) -> dict[str, str]:
    """An equality-based label selector (`a=b,c=d`), as kubectl -l sends it."""
    return dict(kv.split("=", 1) for kv in query.get("labelSelector", [""])[0].split(",") if kv)


def _matches(obj: dict, selector: dict[str, str]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class FakeApiServer:
    def __init__(self) -> None:
        self.jobsets: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.logs: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.forbidden = False
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def _send(self, code: int, body: dict | str) -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                with server.lock:
                    server.requests.append((method, url.path))
                    if server.forbidden:
                        return self._send(403, _status(403, "Forbidden", "jobsets.jobset.x-k8s.io is forbidden"))
                    body = None
                    if method in ("POST", "PUT", "PATCH"):
                        length = int(self.headers.get("Content-Length", 0))
                        body = json.loads(self.rfile.read(length) or b"{}")
                    code, out = server.route(method, url.path, parse_qs(url.query), body)
                self._send(code, out)

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._handle("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, path: Path, context: str = "loopback") -> Path:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "tester", "namespace": "default"}}],
            "current-context": context,
        }
        path.write_text(json.dumps(cfg))
        return path

    def set_state(self, name: str, condition: str, restarts: int = 0, namespace: str = "default") -> None:
        """What the JobSet controller would write: a terminal condition (or none) and restart count."""
        obj = self.jobsets[(namespace, name)]
        conds = [{"type": condition, "status": "True", "reason": condition, "message": f"jobset {condition.lower()}"}]
        obj["status"] = {"restarts": restarts, "conditions": conds if condition else []}

    def route(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict | str]:
        m = JOBSETS.match(path)
        if m:
            ns, name = m.groups()
            if method == "POST":
                name = body["metadata"]["name"]
                if (ns, name) in self.jobsets:
                    return 409, _status(409, "AlreadyExists", f'jobsets.jobset.x-k8s.io "{name}" already exists')
                obj = json.loads(json.dumps(body))
                obj["metadata"].update(
                    uid=f"uid-{len(self.jobsets)}",
                    resourceVersion="1",
                    creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                )
                self.jobsets[(ns, name)] = obj
                self._create_pods(ns, obj)
                return 201, obj
            if name is None and method == "GET":
                sel = _selector(query)
                items = [o for (n, _), o in self.jobsets.items() if n == ns and _matches(o, sel)]
                return 200, {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSetList",
                    "items": items,
                    "metadata": {},
                }
            if (ns, name) not in self.jobsets:
                return 404, _status(404, "NotFound", f'jobsets.jobset.x-k8s.io "{name}" not found')
            if method == "GET":
                return 200, self.jobsets[(ns, name)]
            if method == "DELETE":
                obj = self.jobsets.pop((ns, name))
                self.pods = {
                    k: p
                    for k, p in self.pods.items()
                    if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") != name
                }
                return 200, obj
        m = PODS.match(path)
        if m and method == "GET":
            ns, pod, log = m.groups()
            if log:
                if (ns, pod) not in self.pods:
                    return 404, _status(404, "NotFound", f'pods "{pod}" not found')
                return 200, self.logs.get(pod, "")
            sel = _selector(query)
            items = [p for (n, _), p in self.pods.items() if n == ns and _matches(p, sel)]
            return 200, {"apiVersion": "v1", "kind": "PodList", "items": items, "metadata": {}}
        return 404, _status(404, "NotFound", f"no route for {method} {path}")

    def _create_pods(self, ns: str, jobset: dict) -> None:
        """The pods the JobSet and Job controllers would create (one per completion index)."""
        name = jobset["metadata"]["name"]
        for rj in jobset["spec"]["replicatedJobs"]:
            job = rj["template"]["spec"]
            for idx in range(job.get("completions", 1)):
                pod_name = f"{name}-{rj['name']}-0-{idx}-abcde"
                labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": rj["name"]}
                containers = [{"name": c["name"], "image": c["image"]} for c in job["template"]["spec"]["containers"]]
                self.pods[(ns, pod_name)] = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": pod_name, "namespace": ns, "labels": labels},
                    "spec": {"containers": containers},
                }
                if any(c["name"] == "rlexp" for c in containers):
                    self.logs[pod_name] = f"rlexp: training {name} step 1\nrlexp: step 2\n"
