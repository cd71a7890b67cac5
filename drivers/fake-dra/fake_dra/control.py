"""The control socket: HTTP over a unix socket next to dra.sock, for switching faults and reading the call log.

    GET  /healthz    {"driver", "node", "generation"}
    GET  /faults     {"faults": [...]}
    PUT  /faults     {"faults": [...]}  replace every fault (an empty list restores normal behaviour); answers
                                        after the slice and health stream reflect the change
    GET  /calls      {"calls": [...]}   every gRPC call served, oldest first
    GET  /prepared   {"claims": {...}}  prepared claims by UID

A local socket (not a ConfigMap) so a change takes effect before the request returns: tests never race it.
"""

from __future__ import annotations

import json
import socketserver
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from fake_dra.core import DriverCore
from fake_dra.faults import Fault, FaultError


class _UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def serve(core: DriverCore, path: Path) -> socketserver.BaseServer:
    """Start the control server in a background thread."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._reply(
                    HTTPStatus.OK,
                    {"driver": core.config.driver_name, "node": core.config.node_name, "generation": core.generation},
                )
            elif self.path == "/faults":
                self._reply(HTTPStatus.OK, {"faults": [f.to_json() for f in core.faults.active()]})
            elif self.path == "/calls":
                self._reply(HTTPStatus.OK, {"calls": core.calls.calls()})
            elif self.path == "/prepared":
                self._reply(HTTPStatus.OK, {"claims": core.prepared.all()})
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})

        def do_PUT(self) -> None:
            if self.path != "/faults":
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})
                return
            try:
                raw = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                faults = [Fault.parse(item) for item in raw.get("faults", [])]
            except (ValueError, FaultError, AttributeError) as error:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": str(error)})
                return
            if any(f.mode == "crash" for f in faults):
                self._reply(HTTPStatus.ACCEPTED, {"faults": [f.to_json() for f in faults], "crashing": True})
            try:
                core.set_faults(faults)
            except ApiException as error:
                self._reply(HTTPStatus.BAD_GATEWAY, {"error": f"republish slice: {error.status} {error.reason}"})
                return
            self._reply(HTTPStatus.OK, {"faults": [f.to_json() for f in faults], "generation": core.generation})

    path.unlink(missing_ok=True)
    server = _UnixHTTPServer(str(path), Handler)
    threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
    return server
