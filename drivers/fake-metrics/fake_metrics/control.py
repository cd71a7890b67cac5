"""Control socket (HTTP over a unix socket): GET/PUT /faults, GET /requests (what the adapter served, by user)."""

from __future__ import annotations

import socketserver
from http import HTTPStatus
from pathlib import Path
from typing import Any

from dra_wire.unix_http import JSONRequestHandler, serve_unix
from fake_metrics.samples import FaultBox, Faults


def serve(path: Path, faults: FaultBox, requests: list[dict[str, Any]]) -> socketserver.BaseServer:
    """Start the control server in a background thread."""

    class Handler(JSONRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server names handlers do_<METHOD>
            if self.path == "/faults":
                self.reply(HTTPStatus.OK, faults.get().to_json())
            elif self.path == "/requests":
                self.reply(HTTPStatus.OK, {"requests": list(requests)})
            else:
                self.reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})

        def do_PUT(self) -> None:  # noqa: N802 - http.server names handlers do_<METHOD>
            if self.path != "/faults":
                self.reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})
                return
            try:
                parsed = Faults.parse(self.read_json())
            except ValueError as error:
                self.reply(HTTPStatus.BAD_REQUEST, {"error": str(error)})
                return
            faults.set(parsed)
            self.reply(HTTPStatus.OK, parsed.to_json())

    return serve_unix(path, Handler)
