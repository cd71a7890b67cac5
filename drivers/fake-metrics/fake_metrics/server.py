"""The HTTPS side: discovery and metrics endpoints, reachable only through the aggregation layer.

Clients must present a certificate from the front-proxy CA with an allowed common name (the kube-apiserver's
proxy client); the user it acts for comes in X-Remote-User. kube-apiserver has already authorized the request.
"""

from __future__ import annotations

import re
import ssl
import threading
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from dra_wire.kube_json import CoreReader
from dra_wire.unix_http import JSONRequestHandler
from fake_metrics.samples import GROUP, VERSIONS, FaultBox, node_metrics, pod_metrics

POD_PATH = re.compile(r"^/apis/metrics\.k8s\.io/(?P<v>[^/]+)(/namespaces/(?P<ns>[^/]+))?/pods(/(?P<name>[^/]+))?$")
NODE_PATH = re.compile(r"^/apis/metrics\.k8s\.io/(?P<v>[^/]+)/nodes(/(?P<name>[^/]+))?$")
# Lists of nodes and pods are read from the API server per request; a slow server fails the request.
LIST_TIMEOUT = 10.0
RUNNING = "Running"
RUNNING_SELECTOR = f"status.phase={RUNNING}"


class MetricsHandler(JSONRequestHandler):
    """Serves one request; configured through class attributes set by `serve`."""

    faults: FaultBox
    core: CoreReader
    allowed_names: set[str]
    requests: list[dict[str, Any]]

    def _status(self, status: HTTPStatus, message: str) -> None:
        self.reply(
            status,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": message,
                "reason": status.phrase.replace(" ", ""),
                "code": int(status),
            },
        )

    def _front_proxy_name(self) -> str | None:
        certificate = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        if not certificate:
            return None
        subject: dict[str, str] = {}
        for rdn in certificate.get("subject", ()):
            for pair in rdn:
                if isinstance(pair, tuple) and len(pair) == 2:
                    subject[str(pair[0])] = str(pair[1])
        return str(subject.get("commonName")) if subject.get("commonName") else None

    def do_GET(self) -> None:  # noqa: N802 - http.server names handlers do_<METHOD>
        """Health, discovery and metrics; everything but health needs the front-proxy certificate."""
        path = self.path.split("?", 1)[0]
        if path in ("/healthz", "/livez", "/readyz"):
            self.reply(HTTPStatus.OK, {"status": "ok"})
            return
        proxy = self._front_proxy_name()
        if proxy not in self.allowed_names:
            self._status(HTTPStatus.UNAUTHORIZED, f"client certificate {proxy!r} is not an allowed front proxy")
            return
        self.requests.append(
            {"user": self.headers.get("X-Remote-User"), "path": path, "userAgent": self.headers.get("User-Agent")}
        )
        faults = self.faults.get()
        if faults.unavailable:
            self._status(HTTPStatus.SERVICE_UNAVAILABLE, "metrics adapter unavailable (injected)")
            return
        served = [v for v in VERSIONS if v in faults.served]
        if path == "/apis":
            self.reply(HTTPStatus.OK, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(served)]})
        elif path == f"/apis/{GROUP}":
            self.reply(HTTPStatus.OK, _group(served))
        elif path.startswith(f"/apis/{GROUP}/") and path.count("/") == 3:
            version = path.rsplit("/", 1)[1]
            if version not in served:
                self._status(HTTPStatus.NOT_FOUND, f"{GROUP}/{version} is not served")
            else:
                self.reply(HTTPStatus.OK, _resources(version))
        elif match := NODE_PATH.match(path):
            self._nodes(match["v"], match["name"], served)
        elif match := POD_PATH.match(path):
            self._pods(match["v"], match["ns"], match["name"], served)
        else:
            self._status(HTTPStatus.NOT_FOUND, f"no such path {path}")

    def _nodes(self, version: str, name: str | None, served: list[str]) -> None:
        if version not in served:
            self._status(HTTPStatus.NOT_FOUND, f"{GROUP}/{version} is not served")
            return
        faults = self.faults.get()
        if name is not None:
            if self.core.get("/api/v1/nodes/{name}", name=name) is None:
                self._status(HTTPStatus.NOT_FOUND, f'nodemetrics "{name}" not found')
            else:
                self.reply(HTTPStatus.OK, node_metrics(name, version, faults))
            return
        listed = self.core.get("/api/v1/nodes")
        names = [node["metadata"]["name"] for node in listed["items"]]
        items = [node_metrics(n, version, faults) for n in sorted(names)]
        self.reply(
            HTTPStatus.OK,
            {"kind": "NodeMetricsList", "apiVersion": f"{GROUP}/{version}", "metadata": {}, "items": items},
        )

    def _pods(self, version: str, namespace: str | None, name: str | None, served: list[str]) -> None:
        if version not in served:
            self._status(HTTPStatus.NOT_FOUND, f"{GROUP}/{version} is not served")
            return
        faults = self.faults.get()
        if name is not None and namespace:
            pod = self.core.get("/api/v1/namespaces/{namespace}/pods/{name}", namespace=namespace, name=name)
            sample = pod_metrics(pod, version, faults) if pod and pod["status"].get("phase") == RUNNING else None
            if sample is not None:
                self.reply(HTTPStatus.OK, sample)
            else:
                self._status(HTTPStatus.NOT_FOUND, f'podmetrics "{name}" not found')
            return
        # Raw JSON, and only Running pods: the answer stays a plain dict (no model per pod) on a large cluster.
        running = {"fieldSelector": RUNNING_SELECTOR}
        listed = (
            self.core.get("/api/v1/namespaces/{namespace}/pods", namespace=namespace, query=running)
            if namespace
            else self.core.get("/api/v1/pods", query=running)
        )
        samples = [s for p in listed["items"] if (s := pod_metrics(p, version, faults)) is not None]
        if name is not None:  # a name without a namespace: the first Running pod of that name, in any namespace
            found = [s for s in samples if s["metadata"]["name"] == name]
            if found:
                self.reply(HTTPStatus.OK, found[0])
            else:
                self._status(HTTPStatus.NOT_FOUND, f'podmetrics "{name}" not found')
            return
        self.reply(
            HTTPStatus.OK,
            {"kind": "PodMetricsList", "apiVersion": f"{GROUP}/{version}", "metadata": {}, "items": samples},
        )


def _group(served: list[str]) -> dict[str, Any]:
    versions = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in served]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": versions,
        "preferredVersion": versions[0] if versions else {},
    }


def _resources(version: str) -> dict[str, Any]:
    verbs = ["get", "list"]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{version}",
        "resources": [
            {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": verbs},
            {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": verbs},
        ],
    }


def serve(
    address: tuple[str, int],
    *,
    cert: Path,
    key: Path,
    front_proxy_ca: Path,
    allowed_names: set[str],
    faults: FaultBox,
    core: CoreReader,
    requests: list[dict[str, Any]],
) -> ThreadingHTTPServer:
    """Start the HTTPS server in a background thread."""
    handler = type(
        "Handler",
        (MetricsHandler,),
        {"faults": faults, "core": core, "allowed_names": allowed_names, "requests": requests},
    )
    server = ThreadingHTTPServer(address, handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(cafile=front_proxy_ca)
    context.verify_mode = ssl.CERT_OPTIONAL  # health probes come without a client certificate
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-https", daemon=True).start()
    return server
