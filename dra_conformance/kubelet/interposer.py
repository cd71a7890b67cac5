"""A kubelet-side fault interposer: the "slow driver" and "failing driver" fixtures for any driver under a real kubelet.

The interposer registers with the node's kubelet under the driver's own name, through a registration socket of
its own in `plugins_registry`, and forwards every DRAPlugin and DRAResourceHealth call to the driver's socket
unchanged, as raw bytes. The kubelet, which supports several registered instances of one driver (seamless
upgrades), uses the newest: the interposer. Per method and per claim it can add a delay, answer with an error, or
hang until the fault is cleared or the caller's deadline passes. Removing its registration socket hands the
kubelet back to the driver's own instance. Nothing about the driver changes; it needs only its sockets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from dra_conformance.kubelet.client import DriverClient
from dra_conformance.model.driver import DriverEndpoint
from dra_wire.kubelet_api import KubeletAPI
from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2 as registration
from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2_grpc as registration_grpc

# Registered version name -> the proto package of its DRAPlugin service (the gRPC path prefix).
DRA_SERVICES = {
    "v1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1",
    "v1beta1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1beta1",
}
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
PREPARE = "NodePrepareResources"
CLAIM_METHODS = (PREPARE, "NodeUnprepareResources")
# Concurrent calls the kubelet may have in flight through the interposer (prepares of several pods, health streams).
WORKERS = 16
# Longest a hang fault holds a call when the caller set no deadline (the kubelet always sets one).
HANG_LIMIT = 300.0


def answer_is_error(answer: str) -> bool:
    """Whether a recorded per-claim answer (protobuf text format) carries the claim's `error`.

    `error` is a top-level field: the one line that starts with it unindented (nested device fields are indented).
    """
    return any(line.startswith("error:") for line in answer.splitlines())


@dataclass(frozen=True)
class InterposedFault:
    """What the interposer does to calls of `method` (for `claim`, a UID, or every claim when None)."""

    method: str
    kind: str  # "delay", "error" or "hang"
    claim: str | None = None
    delay: float = 0.0
    message: str = "injected by the kubelet-side interposer"

    def applies(self, method: str, claims: list[str]) -> bool:
        """Whether the fault applies to a call of `method` for `claims`."""
        return self.method == method and (self.claim is None or self.claim in claims)


class KubeletInterposer:
    """Sits between one node's kubelet and the driver under test there."""

    def __init__(self, api: KubeletAPI, endpoint: DriverEndpoint, socket_dir: Path) -> None:
        """Interpose for the driver at `endpoint`; the interposer's own DRA socket goes in `socket_dir`."""
        self.api, self.endpoint, self.socket_dir = api, endpoint, socket_dir
        self.registration_socket = endpoint.registrar_dir / f"{endpoint.driver}-interposer.sock"
        self.dra_socket = socket_dir / "interposer-dra.sock"
        self.registered = threading.Event()
        self.calls: list[tuple[str, list[str], str]] = []  # (method, claim UIDs, outcome)
        self.entered: list[tuple[str, list[str]]] = []  # (method, claim UIDs) of every call, when it arrives
        # (method, the driver's answer per claim UID, as protobuf text), for every call the driver answered.
        self.answers: list[tuple[str, dict[str, str]]] = []
        self._faults: list[InterposedFault] = []
        self._cleared = threading.Condition()
        self._servers: list[grpc.Server] = []
        self._upstream: grpc.Channel | None = None
        self._versions: list[str] = []

    # --- faults -----------------------------------------------------------------------------------------------

    def set_faults(self, faults: list[InterposedFault]) -> None:
        """Replace the active faults (an empty list forwards everything untouched)."""
        with self._cleared:
            self._faults = list(faults)
            self._cleared.notify_all()

    def _fault(self, method: str, claims: list[str]) -> InterposedFault | None:
        with self._cleared:
            return next((f for f in self._faults if f.applies(method, claims)), None)

    def _hang(self, fault: InterposedFault, context: grpc.ServicerContext) -> bool:
        """Hold the call until `fault` is cleared (True) or the caller's deadline passes or it gives up (False)."""
        remaining = context.time_remaining()
        limit = HANG_LIMIT if remaining is None else remaining
        # The RPC's end (the caller's deadline or cancel) wakes the wait, so `is_active` is looked at right then.
        context.add_callback(self._wake)
        with self._cleared:
            self._cleared.wait_for(lambda: fault not in self._faults or not context.is_active(), timeout=limit)
            return fault not in self._faults

    def _wake(self) -> None:
        with self._cleared:
            self._cleared.notify_all()

    # --- forwarding -------------------------------------------------------------------------------------------

    def _claims(self, service: str, method: str, raw: bytes) -> list[str]:
        messages = self.api.dra_v1 if service.startswith("v1.") else self.api.dra_v1beta1
        request = getattr(messages, f"{method}Request").FromString(raw)
        return [claim.uid for claim in request.claims]

    def prepare_answers(self, claim: str) -> list[str]:
        """The driver's answer for `claim` to each NodePrepareResources the kubelet made through the interposer."""
        return [by_claim[claim] for method, by_claim in list(self.answers) if method == PREPARE and claim in by_claim]

    def successful_prepare_answers(self, claim: str) -> list[str]:
        """The driver's answers for `claim` that prepared it (no per-claim error).

        A refusal the kubelet retries (a device another claim still holds, say) is not a prepare of the claim.
        """
        return [answer for answer in self.prepare_answers(claim) if not answer_is_error(answer)]

    def _record_answer(self, service: str, method: str, raw: bytes) -> None:
        messages = self.api.dra_v1 if service.startswith("v1.") else self.api.dra_v1beta1
        response = getattr(messages, f"{method}Response").FromString(raw)
        self.answers.append((method, {uid: str(entry) for uid, entry in response.claims.items()}))

    def _claim_call(self, service: str, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        path = f"/{DRA_SERVICES[service]}.DRAPlugin/{method}"

        def forward(raw: bytes, context: grpc.ServicerContext) -> bytes:
            claims = self._claims(service, method, raw)
            self.entered.append((method, claims))
            fault = self._fault(method, claims)
            outcome = "forwarded"
            if fault is not None and fault.kind == "delay":
                threading.Event().wait(fault.delay)  # the injected slowness itself
                outcome = f"delayed {fault.delay:g}s"
            elif fault is not None and fault.kind == "hang":
                if not self._hang(fault, context):
                    # A call still hung when its deadline passes never reaches the driver; the caller sees its
                    # own deadline, whichever side notices first.
                    self.calls.append((method, claims, "hung"))
                    context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "held by the interposer's hang fault")
                outcome = "hung, then released"
            elif fault is not None:
                self.calls.append((method, claims, f"error: {fault.message}"))
                context.abort(grpc.StatusCode.UNAVAILABLE, fault.message)
            self.calls.append((method, claims, outcome))
            assert self._upstream is not None
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self._upstream.unary_unary(path)
            try:
                response: bytes = call(raw, timeout=context.time_remaining())
            except grpc.RpcError as failed:
                # Relay the driver's own status (a raised error would reach the kubelet as UNKNOWN).
                context.abort(failed.code(), failed.details() or "")
            self._record_answer(service, method, response)
            return response

        return forward

    def _health_call(self, service: str) -> Callable[[bytes, grpc.ServicerContext], Iterator[bytes]]:
        path = f"/{service}/NodeWatchResources"

        def forward(raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            assert self._upstream is not None
            call: grpc.UnaryStreamMultiCallable[bytes, bytes] = self._upstream.unary_stream(path)
            stream = call(raw)

            def cancel() -> None:
                stream.cancel()

            context.add_callback(cancel)
            yield from stream

        return forward

    def _handlers(self) -> list[grpc.GenericRpcHandler]:
        handlers = [
            grpc.method_handlers_generic_handler(
                f"{package}.DRAPlugin",
                {
                    method: grpc.unary_unary_rpc_method_handler(self._claim_call(service, method))
                    for method in CLAIM_METHODS
                },
            )
            for service, package in DRA_SERVICES.items()
        ]
        handlers += [
            grpc.method_handlers_generic_handler(
                service, {"NodeWatchResources": grpc.unary_stream_rpc_method_handler(self._health_call(service))}
            )
            for service in HEALTH_SERVICES
        ]
        return handlers

    # --- registration -----------------------------------------------------------------------------------------

    def _registration_servicer(self) -> registration_grpc.RegistrationServicer:
        interposer = self

        class Servicer(registration_grpc.RegistrationServicer):
            def GetInfo(  # noqa: N802
                self, request: registration.InfoRequest, context: grpc.ServicerContext
            ) -> registration.PluginInfo:
                return registration.PluginInfo(
                    type="DRAPlugin",
                    name=interposer.endpoint.driver,
                    endpoint=str(interposer.dra_socket),
                    supported_versions=interposer._versions,
                )

            def NotifyRegistrationStatus(  # noqa: N802
                self, request: registration.RegistrationStatus, context: grpc.ServicerContext
            ) -> registration.RegistrationStatusResponse:
                if request.plugin_registered:
                    interposer.registered.set()
                return registration.RegistrationStatusResponse()

        return Servicer()

    def start(self, timeout: float) -> None:
        """Serve, and wait until the kubelet accepted the interposer (`timeout` seconds)."""
        self.serve()
        if not self.registered.wait(timeout):
            self.stop()
            raise TimeoutError(
                f"the kubelet did not register the interposer for {self.endpoint.driver} on {self.endpoint.node} "
                f"within {timeout:g}s (no NotifyRegistrationStatus with plugin_registered)"
            )

    def serve(self) -> None:
        """Start forwarding, then offer the registration socket to the kubelet's plugin watcher."""
        with DriverClient(self.api, self.endpoint.registration_socket) as driver:
            info = driver.get_info()
        self._versions = list(info.supported_versions)
        upstream = self.endpoint.reachable(info.endpoint) if info.endpoint else self.endpoint.registration_socket
        self._upstream = grpc.insecure_channel(f"unix://{upstream}")
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        dra = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS), handlers=self._handlers())
        dra.add_insecure_port(f"unix://{self.dra_socket}")
        dra.start()
        self._servers.append(dra)
        registration_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        registration_grpc.add_RegistrationServicer_to_server(self._registration_servicer(), registration_server)
        registration_server.add_insecure_port(f"unix://{self.registration_socket}")
        registration_server.start()  # the socket's appearance in plugins_registry is what the kubelet watches for
        self._servers.append(registration_server)

    def stop(self) -> None:
        """Unregister (remove the registration socket), release held calls, stop serving."""
        self.registration_socket.unlink(missing_ok=True)
        self.set_faults([])
        for server in reversed(self._servers):
            server.stop(grace=None)
        self._servers.clear()
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None
        self.dra_socket.unlink(missing_ok=True)
