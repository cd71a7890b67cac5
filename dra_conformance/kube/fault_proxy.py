"""A proxy in front of kube-apiserver that injects API faults for one client: the driver under test.

The driver's kubeconfig points at the proxy instead of the API server. The proxy terminates TLS with a serving
certificate of the cluster's CA (so the driver's kubeconfig keeps its CA and token), forwards every request to
the real API server, and streams the answer back (watches included). For requests that match the plan's pattern
(by default: writes of a ResourceClaim's status) it adds latency, answers with a burst of error statuses (429,
503) instead of forwarding, or drops the connection without an answer.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# PUT/PATCH .../namespaces/<ns>/resourceclaims/<name>/status in any served version of resource.k8s.io.
STATUS_WRITES = re.compile(r"^(PUT|PATCH) /apis/resource\.k8s\.io/[^/]+/namespaces/[^/]+/resourceclaims/[^/]+/status")
# Headers the proxy sets itself (hop-by-hop, or recomputed for the streamed answer).
HOP_BY_HOP = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"})
STREAM_CHUNK = 65536


@dataclass
class FaultPlan:
    """What happens to requests whose "METHOD path" matches `pattern`, in order of arrival."""

    pattern: re.Pattern[str] = STATUS_WRITES
    # Seconds added before each matching request is handled.
    latency: float = 0.0
    # Statuses answered instead of forwarding, one per matching request (a burst), before any drop.
    statuses: list[int] = field(default_factory=list)
    # Matching requests (after the statuses) whose connection is closed without an answer.
    drops: int = 0


class ApiFaultProxy:
    """Runs the proxy on 127.0.0.1 in background threads; `plan` can be replaced at any time."""

    def __init__(self, upstream: str, ca_file: Path, serving_cert: Path, serving_key: Path) -> None:
        """Forward to `upstream` (trusting `ca_file`); serve TLS with the given certificate."""
        target = urlsplit(upstream)
        self.upstream_host, self.upstream_port = str(target.hostname), int(target.port or 443)
        self.upstream_tls = ssl.create_default_context(cafile=str(ca_file))
        serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        serving.load_cert_chain(str(serving_cert), str(serving_key))
        serving.set_alpn_protocols(["http/1.1"])  # Go clients would otherwise ask for HTTP/2
        self.plan = FaultPlan()
        self.injected: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.socket = serving.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="api-fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        """Where clients reach the proxy."""
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ApiFaultProxy:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; open connections end with their threads."""
        self._server.shutdown()
        self._server.server_close()

    def fault_for(self, request: str) -> tuple[float, int | None, bool]:
        """(latency, status to answer or None, drop) for one request line "METHOD path"."""
        with self._lock:
            plan = self.plan
            if not plan.pattern.search(request):
                return 0.0, None, False
            if plan.statuses:
                status = plan.statuses.pop(0)
                self.injected.append(f"{request} -> {status}")
                return plan.latency, status, False
            if plan.drops:
                plan.drops -= 1
                self.injected.append(f"{request} -> dropped")
                return plan.latency, None, True
            return plan.latency, None, False


def _handler(proxy: ApiFaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Stay quiet: what was injected is recorded on the proxy."""

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            latency, status, drop = proxy.fault_for(f"{self.command} {self.path}")
            if latency:
                time.sleep(latency)  # the injected latency itself
            if drop:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if status is not None:
                self._answer_status(status)
                return
            self._forward(body)

        def _answer_status(self, status: int) -> None:
            payload = json.dumps(
                {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status, "message": "injected"}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if status == 429:
                self.send_header("Retry-After", "1")
            self.end_headers()
            self.wfile.write(payload)

        def _forward(self, body: bytes | None) -> None:
            upstream = http.client.HTTPSConnection(proxy.upstream_host, proxy.upstream_port, context=proxy.upstream_tls)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while chunk := answer.read1(STREAM_CHUNK):
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (OSError, http.client.HTTPException):
                self.close_connection = True  # the client or the API server went away (a watch ended)
            finally:
                upstream.close()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815

    return Handler
