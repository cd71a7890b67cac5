"""gRPC services on unix sockets: plugin registration, DRAPlugin (v1 and v1beta1), DRAResourceHealth (v1, v1alpha1)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from types import ModuleType
from typing import Any

import grpc

from dra_wire.kubelet_api import KubeletAPI
from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2 as registration
from dra_wire.kubeletapi.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from fake_dra.broken import PRODUCT_CDI_VENDOR, BrokenMode
from fake_dra.config import DriverConfig
from fake_dra.core import ClaimRef, ClaimRefused, DriverCore

# The DRAPlugin services GetInfo lists ("<gRPC package>.<service>"); the kubelet picks the first it supports.
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
# A whole-call refusal's gRPC code: what a plain Go error returned by the upstream kubeletplugin helper becomes.
REFUSAL_CODE = grpc.StatusCode.UNKNOWN
# Enough threads for the protocol suite's concurrent prepares plus open health streams.
WORKERS = 16
# How often an idle health stream checks whether its caller went away.
HEALTH_IDLE_CHECK = 1.0
# The kubelet reports a device's health as Unknown when it is not re-sent within health_check_timeout (default
# 30 s, k8s.io/kubelet pkg/apis/dra-health/v1/api.proto:57-63): every device is re-sent at least this often. Any
# interval under the window keeps the contract; a short one keeps the protocol suite's two-report check short.
HEALTH_RESEND_INTERVAL = 5.0


def registered_name(config: DriverConfig) -> str:
    """The name GetInfo registers: the driver name; the REGISTERS_PRODUCT_NAME mutant gives the product's instead."""
    if config.is_broken(BrokenMode.REGISTERS_PRODUCT_NAME):
        return PRODUCT_CDI_VENDOR
    return config.driver_name


def supported_versions(config: DriverConfig) -> list[str]:
    """What GetInfo advertises: every service on dra.sock, the DRAResourceHealth versions included.

    The kubelet reads a plugin's health stream only if GetInfo lists a DRAResourceHealth version it supports
    (k8s.io/kubernetes@v1.37.2 pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go:352-359, v1 before v1alpha1), as the
    upstream helper advertises them (k8s.io/dynamic-resource-allocation@v0.37.2 kubeletplugin/draplugin.go:1037-1045).
    """
    return [*DRA_SERVICES, *(f"{version}.DRAResourceHealth" for version in config.health_services)]


def _has_share_id(messages: ModuleType) -> bool:
    return "share_id" in messages.Device.DESCRIPTOR.fields_by_name


def _claims(request: Any) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in request.claims]


def dra_servicer(core: DriverCore, messages: ModuleType, services: ModuleType) -> Any:
    """A DRAPlugin servicer for one API version (v1 and v1beta1 have the same shape)."""

    class Servicer(services.DRAPluginServicer):  # type: ignore[name-defined,misc]
        def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
            response = messages.NodePrepareResourcesResponse()
            try:
                results = core.prepare(_claims(request))
            except ClaimRefused as refused:
                context.abort(REFUSAL_CODE, f"prepare refused: {refused}")
            for uid, result in results.items():
                answer = response.claims[uid]
                if result.error:
                    answer.error = result.error
                for device in result.devices:
                    answer.devices.add(
                        request_names=device["requestNames"],
                        pool_name=device["poolName"],
                        device_name=device["deviceName"],
                        cdi_device_ids=device["cdiDeviceIDs"],
                        # v1beta1's Device has no share_id.
                        **({"share_id": device["shareID"]} if "shareID" in device and _has_share_id(messages) else {}),
                    )
            return response

        def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
            response = messages.NodeUnprepareResourcesResponse()
            for uid, error in core.unprepare(_claims(request)).items():
                response.claims[uid].error = error
            return response

    return Servicer()


def health_servicer(core: DriverCore, messages: ModuleType, services: ModuleType) -> Any:
    """A DRAResourceHealth servicer streaming every device's health, and again on each change."""

    class Servicer(services.DRAResourceHealthServicer):  # type: ignore[name-defined,misc]
        def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
            started = time.time()
            version, last_sent = -1, 0.0
            while context.is_active():
                current = core.wait_health_change(version, HEALTH_IDLE_CHECK)
                if current == version and time.monotonic() - last_sent < HEALTH_RESEND_INTERVAL:
                    continue
                version, last_sent = current, time.monotonic()
                response = messages.NodeWatchResourcesResponse()
                for device, healthy, message in core.health():
                    entry = response.devices.add(
                        health=messages.HEALTHY if healthy else messages.UNHEALTHY,
                        last_updated_time=int(time.time()),
                        message=message,
                    )
                    entry.device.pool_name = core.health_pool()
                    entry.device.device_name = device
                yield response
            core.calls.record("NodeWatchResources", started, claims=[], outcome="closed")

    return Servicer()


def registration_servicer(core: DriverCore) -> registration_grpc.RegistrationServicer:
    """The plugin-watcher registration service the kubelet calls first."""

    class Servicer(registration_grpc.RegistrationServicer):
        def GetInfo(  # noqa: N802
            self, request: registration.InfoRequest, context: grpc.ServicerContext
        ) -> registration.PluginInfo:
            started = time.time()
            fault = core.faults.find("registration-failure")
            if fault is not None:
                core.calls.record("GetInfo", started, claims=[], outcome=f"error: {fault.message}")
                context.abort(grpc.StatusCode.UNAVAILABLE, f"registration failed (injected): {fault.message}")
            core.calls.record("GetInfo", started, claims=[], outcome="ok")
            return registration.PluginInfo(
                type="DRAPlugin",
                name=registered_name(core.config),
                endpoint=str(core.config.dra_socket),
                supported_versions=supported_versions(core.config),
            )

        def NotifyRegistrationStatus(  # noqa: N802
            self, request: registration.RegistrationStatus, context: grpc.ServicerContext
        ) -> registration.RegistrationStatusResponse:
            outcome = "registered" if request.plugin_registered else f"rejected: {request.error}"
            core.calls.record("NotifyRegistrationStatus", time.time(), claims=[], outcome=outcome)
            if request.plugin_registered:
                core.registered()
            return registration.RegistrationStatusResponse()

    return Servicer()


def start(core: DriverCore, api: KubeletAPI) -> list[grpc.Server]:
    """Serve the DRA socket first, then the registration socket (its appearance tells the kubelet to connect)."""
    config = core.config
    config.dra_socket.parent.mkdir(parents=True, exist_ok=True)
    config.registration_socket.parent.mkdir(parents=True, exist_ok=True)
    for path in (config.dra_socket, config.registration_socket):
        path.unlink(missing_ok=True)  # left by a crashed predecessor

    dra = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS))
    api.dra_v1_grpc.add_DRAPluginServicer_to_server(dra_servicer(core, api.dra_v1, api.dra_v1_grpc), dra)
    api.dra_v1beta1_grpc.add_DRAPluginServicer_to_server(dra_servicer(core, api.dra_v1beta1, api.dra_v1beta1_grpc), dra)
    health = {"v1": (api.health_v1, api.health_v1_grpc), "v1alpha1": (api.health_v1alpha1, api.health_v1alpha1_grpc)}
    for version in config.health_services:  # exactly the versions GetInfo advertises
        messages, services = health[version]
        services.add_DRAResourceHealthServicer_to_server(health_servicer(core, messages, services), dra)
    dra.add_insecure_port(f"unix://{config.dra_socket}")
    dra.start()

    registration_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    registration_grpc.add_RegistrationServicer_to_server(registration_servicer(core), registration_server)
    registration_server.add_insecure_port(f"unix://{config.registration_socket}")
    registration_server.start()
    return [registration_server, dra]
