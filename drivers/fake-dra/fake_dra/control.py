"""The control socket: HTTP over a unix socket next to dra.sock, for switching faults and reading the call log.

    GET  /healthz    {"driver", "node", "generation"}
    GET  /faults     {"faults": [...]}
    PUT  /faults     {"faults": [...]}  replace every fault (an empty list restores normal behaviour); answers
                                        after the slice and health stream reflect the change
    GET  /calls      {"calls": [...]}   every gRPC call served, oldest first
    GET  /prepared   {"claims": {...}}  prepared claims by UID
    GET  /attachments {"attachments": [...]} gpu-fabric: every attach of the controller, oldest first

A local socket (not a ConfigMap) so a change takes effect before the request returns: tests never race it.
"""

from __future__ import annotations

import socketserver
from http import HTTPStatus
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from dra_wire.unix_http import JSONRequestHandler, serve_unix
from fake_dra.core import DriverCore
from fake_dra.faults import Fault, FaultError


def serve(core: DriverCore, path: Path) -> socketserver.BaseServer:
    """Start the control server in a background thread."""

    class Handler(JSONRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server names handlers do_<METHOD>
            if self.path == "/healthz":
                self.reply(
                    HTTPStatus.OK,
                    {"driver": core.config.driver_name, "node": core.config.node_name, "generation": core.generation},
                )
            elif self.path == "/faults":
                self.reply(HTTPStatus.OK, {"faults": [f.to_json() for f in core.faults.active()]})
            elif self.path == "/calls":
                self.reply(HTTPStatus.OK, {"calls": core.calls.calls()})
            elif self.path == "/prepared":
                self.reply(HTTPStatus.OK, {"claims": core.prepared.all()})
            elif self.path == "/attachments":
                self.reply(HTTPStatus.OK, {"attachments": core.attachments.to_json()})
            else:
                self.reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})

        def do_PUT(self) -> None:  # noqa: N802 - http.server names handlers do_<METHOD>
            if self.path != "/faults":
                self.reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})
                return
            try:
                raw = self.read_json()
                faults = [Fault.parse(item) for item in raw.get("faults", [])]
            except (ValueError, FaultError, AttributeError) as error:
                self.reply(HTTPStatus.BAD_REQUEST, {"error": str(error)})
                return
            if any(f.mode == "crash" for f in faults):
                self.reply(HTTPStatus.ACCEPTED, {"faults": [f.to_json() for f in faults], "crashing": True})
            try:
                core.set_faults(faults)
            except ApiException as error:
                self.reply(HTTPStatus.BAD_GATEWAY, {"error": f"republish slice: {error.status} {error.reason}"})
                return
            self.reply(HTTPStatus.OK, {"faults": [f.to_json() for f in faults], "generation": core.generation})

    return serve_unix(path, Handler)
