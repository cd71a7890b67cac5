"""JSON over HTTP on a unix socket: how tests reach the control sockets of the reference driver and adapter."""

from __future__ import annotations

import http.client
import json
import socket
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
