"""Control socket (HTTP over a unix socket): GET/PUT /faults, GET /requests (what the adapter served, by user)."""

from __future__ import annotations

import json
import socketserver
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from fake_metrics.samples import FaultBox, Faults


class _UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def serve(path: Path, faults: FaultBox, requests: list[dict[str, Any]]) -> socketserver.BaseServer:
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

        def do_GET(self) -> None:
            if self.path == "/faults":
                self._reply(HTTPStatus.OK, faults.get().to_json())
            elif self.path == "/requests":
                self._reply(HTTPStatus.OK, {"requests": list(requests)})
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})

        def do_PUT(self) -> None:
            if self.path != "/faults":
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})
                return
            try:
                parsed = Faults.parse(
                    json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                )
            except ValueError as error:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": str(error)})
                return
            faults.set(parsed)
            self._reply(HTTPStatus.OK, parsed.to_json())

    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    server = _UnixHTTPServer(str(path), Handler)
    threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
    return server
