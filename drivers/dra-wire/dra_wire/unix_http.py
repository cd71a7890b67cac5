"""JSON over HTTP on a unix socket: how tests reach the control sockets of the reference driver and adapter."""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))


def unix_json_request(path: Path, method: str, resource: str, body: Any = None, *, timeout: float) -> dict[str, Any]:
    """Send one request; a non-2xx answer raises ValueError with the server's `error` text."""
    connection = _UnixHTTPConnection(path, timeout)
    try:
        connection.request(
            method,
            resource,
            body=json.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        payload: dict[str, Any] = json.loads(response.read() or b"{}")
    finally:
        connection.close()
    if response.status >= 300:
        raise ValueError(str(payload.get("error", payload)))
    return payload


class JSONRequestHandler(BaseHTTPRequestHandler):
    """Base of the reference programs' HTTP handlers: JSON replies, no access log (calls are recorded instead)."""

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        """Send `body` as JSON with `status`."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def read_json(self) -> Any:
        """The request body as JSON (an empty body is {})."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")


# How often the serving thread checks for shutdown(): a stopping driver waits up to this long for it (the standard
# library's 0.5 s was a quarter of a driver's whole stop).
SHUTDOWN_POLL = 0.05


class _UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def serve_unix(path: Path, handler: type[BaseHTTPRequestHandler]) -> socketserver.BaseServer:
    """Serve `handler` on a unix socket at `path` from a background thread (a stale socket file is replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    server = _UnixHTTPServer(str(path), handler)
    threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), name=f"http {path.name}", daemon=True).start()
    return server
