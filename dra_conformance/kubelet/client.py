"""Talking to a DRA driver's kubelet-plugin sockets the way the kubelet does (the protocol layer)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dra_conformance.errors import RelayUnavailable
from dra_wire.kubelet_api import KubeletAPI
from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2 as registration
from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2_grpc as registration_grpc

# The kubelet gives NodePrepareResources/NodeUnprepareResources 45 s; the suites use the same budget per call.
KUBELET_CALL_TIMEOUT = 45.0
# Registration is a local socket round trip; anything slower is a broken plugin.
REGISTRATION_TIMEOUT = 5.0
# The DRAResourceHealth services a 1.37 kubelet reads, most recent first: it picks the first one that the plugin
# advertises in GetInfo (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go pickHealthService); v1alpha1 goes in 1.40.
HEALTH_SERVICES = {"v1": "v1.DRAResourceHealth", "v1alpha1": "v1alpha1.DRAResourceHealth"}


class DeadlineExceeded(grpc.RpcError):
    """A call that ended at its deadline, as the kubelet sees it, although the Python client saw CANCELLED.

    A grpc-go server (most drivers) resets the stream with CANCEL once the propagated deadline passes, and when that
    reset arrives before the client's own timer fires, grpc-python reports CANCELLED. The kubelet (grpc-go) checks
    its context first and reports DeadlineExceeded either way; so do the suites.
    """

    def __init__(self, cancelled: grpc.RpcError, elapsed: float) -> None:
        """Wrap the CANCELLED error `cancelled`, which arrived `elapsed` seconds into the call."""
        super().__init__(cancelled)
        self._details = f"deadline passed after {elapsed:.3f}s (the server reset the stream: {details_of(cancelled)})"

    def code(self) -> grpc.StatusCode:
        """DEADLINE_EXCEEDED, what the kubelet reports."""
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self) -> str:
        """When the deadline passed, and what the server's reset said."""
        return self._details


def details_of(error: grpc.RpcError) -> str:
    """An RPC error's details (an RpcError that is not a Call has none)."""
    details = getattr(error, "details", None)
    return str(details()) if callable(details) else str(error)


def ended_by_deadline(error: grpc.RpcError, elapsed: float, timeout: float) -> grpc.RpcError:
    """`error` as the kubelet would see it: a CANCELLED that arrived once `timeout` passed is DEADLINE_EXCEEDED."""
    code = getattr(error, "code", None)
    if callable(code) and code() == grpc.StatusCode.CANCELLED and elapsed >= timeout:
        return DeadlineExceeded(error, elapsed)
    return error


@dataclass(frozen=True)
class ClaimRef:
    """A claim as NodePrepareResources names it."""

    namespace: str
    uid: str
    name: str

    @classmethod
    def of(cls, claim: dict[str, Any]) -> ClaimRef:
        """From a ResourceClaim read from the API."""
        meta = claim["metadata"]
        return cls(meta["namespace"], meta["uid"], meta["name"])


@dataclass
class ClaimAnswer:
    """What a driver answered for one claim."""

    error: str = ""
    devices: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class CallResult:
    """One call: per-claim answers and the latency the caller saw."""

    claims: dict[str, ClaimAnswer]
    latency: float


class DriverClient:
    """A kubelet-side client of one driver on one node: registration socket first, then its endpoint."""

    def __init__(
        self,
        api: KubeletAPI,
        registration_socket: Path,
        reachable: Callable[[str], str] = lambda path: path,
        relay_errors: Callable[[], list[str]] = list,
    ) -> None:
        """Reach the driver whose registration socket is `registration_socket`.

        `reachable` maps a socket path the driver names (GetInfo's endpoint, a path on its node) to where this
        machine reaches it, and `relay_errors` tells what a node agent's relay could not carry so far
        (`DriverEndpoint.reachable` and `relay_errors`): a call that failed because the relay did raises
        `RelayUnavailable`, the suite's problem, instead of the driver's gRPC error.
        """
        self.api = api
        self.registration_socket = registration_socket
        self.reachable = reachable
        self.relay_check = _RelayCheck(relay_errors)
        self._channels: list[grpc.Channel] = []
        self._endpoint: grpc.Channel | None = None

    def close(self) -> None:
        """Close every channel this client opened."""
        for channel in self._channels:
            channel.close()
        self._channels.clear()
        self._endpoint = None

    def __enter__(self) -> DriverClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _channel(self, socket: Path | str) -> grpc.Channel:
        channel = grpc.insecure_channel(f"unix://{socket}")
        self._channels.append(channel)
        return grpc.intercept_channel(channel, self.relay_check)

    def get_info(self, timeout: float = REGISTRATION_TIMEOUT) -> registration.PluginInfo:
        """Registration/GetInfo: the PluginInfo the kubelet validates (`timeout`: a shorter deadline, for probes)."""
        stub = registration_grpc.RegistrationStub(self._channel(self.registration_socket))
        started = time.monotonic()
        try:
            return stub.GetInfo(registration.InfoRequest(), timeout=timeout)
        except grpc.RpcError as error:
            raise ended_by_deadline(error, time.monotonic() - started, timeout) from None

    def notify_registration_status(
        self, registered: bool = True, error: str = ""
    ) -> registration.RegistrationStatusResponse:
        """Registration/NotifyRegistrationStatus, as the kubelet sends it after validating the plugin."""
        stub = registration_grpc.RegistrationStub(self._channel(self.registration_socket))
        status = registration.RegistrationStatus(plugin_registered=registered, error=error)
        return stub.NotifyRegistrationStatus(status, timeout=REGISTRATION_TIMEOUT)

    def endpoint(self) -> grpc.Channel:
        """A channel to the DRA service socket that GetInfo names (the registration socket when it names none).

        GetInfo is asked once per client, as the kubelet asks once per plugin registration; the endpoint is
        optional and the kubelet then uses the registration socket itself.
        """
        if self._endpoint is None:
            endpoint = self.get_info().endpoint
            self._endpoint = self._channel(self.reachable(endpoint) if endpoint else self.registration_socket)
        return self._endpoint

    def dra_service_problem(self, version: str = "v1") -> str | None:
        """Why the endpoint GetInfo names does not serve DRAPlugin `version` (None: it does).

        Asks NodePrepareResources for no claims, which prepares nothing: only an endpoint without the service
        answers UNIMPLEMENTED.
        """
        try:
            self._call("NodePrepareResources", [], version, REGISTRATION_TIMEOUT)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                endpoint = self.get_info().endpoint or str(self.registration_socket)
                return f"{endpoint} answers UNIMPLEMENTED for {version}.DRAPlugin: {error.details()}"
        return None

    def _dra(self, version: str) -> tuple[Any, Any]:
        messages, services = (
            (self.api.dra_v1, self.api.dra_v1_grpc)
            if version == "v1"
            else (self.api.dra_v1beta1, self.api.dra_v1beta1_grpc)
        )
        return messages, services.DRAPluginStub(self.endpoint())

    def _call(self, method: str, claims: list[ClaimRef], version: str, timeout: float) -> tuple[Any, float]:
        """Call `method` (NodePrepareResources or NodeUnprepareResources) for `claims`; returns (response, latency)."""
        messages, stub = self._dra(version)
        request = getattr(messages, f"{method}Request")(
            claims=[messages.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
        )
        started = time.monotonic()
        try:
            response = getattr(stub, method)(request, timeout=timeout)
        except grpc.RpcError as error:
            raise ended_by_deadline(error, time.monotonic() - started, timeout) from None
        return response, time.monotonic() - started

    def prepare(
        self, claims: list[ClaimRef], *, version: str = "v1", timeout: float = KUBELET_CALL_TIMEOUT
    ) -> CallResult:
        """NodePrepareResources for `claims`, as the kubelet calls it before starting a pod."""
        response, latency = self._call("NodePrepareResources", claims, version, timeout)
        answers = {
            uid: ClaimAnswer(
                error=answer.error,
                devices=[
                    {
                        "requestNames": list(d.request_names),
                        "poolName": d.pool_name,
                        "deviceName": d.device_name,
                        "cdiDeviceIDs": list(d.cdi_device_ids),
                        # v1beta1's Device has no share_id; in v1 it is optional.
                        **({"shareID": d.share_id} if _has(d, "share_id") else {}),
                    }
                    for d in answer.devices
                ],
            )
            for uid, answer in response.claims.items()
        }
        return CallResult(answers, latency)

    def unprepare(
        self, claims: list[ClaimRef], *, version: str = "v1", timeout: float = KUBELET_CALL_TIMEOUT
    ) -> CallResult:
        """NodeUnprepareResources for `claims`, as the kubelet calls it after the pod is gone."""
        response, latency = self._call("NodeUnprepareResources", claims, version, timeout)
        return CallResult({uid: ClaimAnswer(error=a.error) for uid, a in response.claims.items()}, latency)

    def health_service(self) -> str | None:
        """The DRAResourceHealth service the kubelet would read: the first it knows that GetInfo advertises.

        None when the driver advertises none (the service is optional; the kubelet then never opens a stream).
        """
        advertised = list(self.get_info().supported_versions)
        return next((service for service in HEALTH_SERVICES.values() if service in advertised), None)

    def first_health_report(self, *, timeout: float = REGISTRATION_TIMEOUT) -> dict[str, str]:
        """The first DRAResourceHealth/NodeWatchResources message: device name -> HEALTHY/UNHEALTHY/UNKNOWN."""
        return {device: health for (_pool, device), health in self.health_reports(1, timeout=timeout)[0][1].items()}

    def _health_stream(self, service: str | None, timeout: float) -> tuple[Any, Any]:
        """`service`'s messages module and an open NodeWatchResources stream of it, its deadline `timeout` seconds.

        `service` defaults to the one the kubelet would pick.
        """
        chosen = service or self.health_service() or HEALTH_SERVICES["v1"]
        messages, services = (
            (self.api.health_v1alpha1, self.api.health_v1alpha1_grpc)
            if chosen == HEALTH_SERVICES["v1alpha1"]
            else (self.api.health_v1, self.api.health_v1_grpc)
        )
        stream = services.DRAResourceHealthStub(self.endpoint()).NodeWatchResources(
            messages.NodeWatchResourcesRequest(), timeout=timeout
        )
        return messages, stream

    def health_reports(
        self, count: int, *, timeout: float, service: str | None = None
    ) -> list[tuple[float, dict[tuple[str, str], str]]]:
        """The first `count` NodeWatchResources messages, each with the seconds since the stream opened.

        Each maps (pool, device) -> HEALTHY/UNHEALTHY/UNKNOWN: the kubelet matches health to allocated devices by
        pool and device name, so both are kept. `service` defaults to the one the kubelet would pick.
        """
        messages, stream = self._health_stream(service, timeout)
        started = time.monotonic()
        reports = []
        try:
            for report in stream:
                devices = {
                    (d.device.pool_name, d.device.device_name): messages.HealthStatus.Name(d.health)
                    for d in report.devices
                }
                reports.append((time.monotonic() - started, devices))
                if len(reports) == count:
                    break
        except grpc.RpcError as error:
            raise ended_by_deadline(error, time.monotonic() - started, timeout) from None
        finally:
            stream.cancel()
        return reports

    def watch_health(
        self,
        settled: Callable[[dict[tuple[str, str], tuple[str, str]]], bool],
        *,
        timeout: float,
        service: str | None = None,
    ) -> list[tuple[float, dict[tuple[str, str], tuple[str, str]]]]:
        """NodeWatchResources messages until one that `settled` accepts, or until `timeout` seconds have passed.

        Each maps (pool, device) -> (HEALTHY/UNHEALTHY/UNKNOWN, message), with the seconds since the stream opened;
        the last one is the accepted one, where one was. A stream ending at the deadline is no error: the messages
        seen so far are the answer. `service` defaults to the one the kubelet would pick.
        """
        messages, stream = self._health_stream(service, timeout)
        started = time.monotonic()
        reports: list[tuple[float, dict[tuple[str, str], tuple[str, str]]]] = []
        try:
            for report in stream:
                devices = {
                    (d.device.pool_name, d.device.device_name): (messages.HealthStatus.Name(d.health), d.message)
                    for d in report.devices
                }
                reports.append((time.monotonic() - started, devices))
                if settled(devices):
                    break
        except grpc.RpcError as error:
            ended = ended_by_deadline(error, time.monotonic() - started, timeout)
            code = getattr(ended, "code", None)
            if not (callable(code) and code() == grpc.StatusCode.DEADLINE_EXCEEDED):
                raise ended from None
        finally:
            stream.cancel()
        return reports


def _has(message: Any, field_name: str) -> bool:
    """Whether `message` has the optional field `field_name` set (False where its version lacks the field)."""
    return field_name in message.DESCRIPTOR.fields_by_name and bool(message.HasField(field_name))


class _RelayCheck(grpc.UnaryUnaryClientInterceptor):
    """Turns a unary call that failed UNAVAILABLE, after the relay failed this client, into `RelayUnavailable`.

    Every such failure since the client was made counts: once a connection failed, gRPC fails the channel's next
    calls without a new connection (its backoff), so no new relay problem comes with them.
    """

    def __init__(self, relay_errors: Callable[[], list[str]]) -> None:
        self.relay_errors = relay_errors
        self.before = len(relay_errors())

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        outcome = continuation(details, request)
        if outcome.code() == grpc.StatusCode.UNAVAILABLE:
            problems = self.relay_errors()[self.before :]
            if problems:
                raise RelayUnavailable(f"{details.method}: the node agent's relay did not carry it: {problems[-1]}")
        return outcome
