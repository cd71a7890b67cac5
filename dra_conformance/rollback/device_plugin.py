"""A reference device plugin: kubelet device plugin API v1beta1, serving an extended resource of N fake devices.

The rollback rehearsal's "device plugin" path on a real kubelet (DRA -> device plugin and back): the kubelet
learns the resource from this plugin, advertises it in the Node's allocatable, and calls `Allocate` when a pod
that asks for it starts. What a container gets is an environment variable naming its device ids
(`DEVICE_IDS_ENV`), so a workload can show which devices it holds.

The plugin serves `v1beta1.DevicePlugin` on a unix socket in the kubelet's device-plugin directory (the kubelet
hard-codes `/var/lib/kubelet/device-plugins/` whatever its `--root-dir`), then calls `Registration.Register` on
`kubelet.sock` there. A restarting kubelet recreates `kubelet.sock` and removes the other sockets of the
directory: the plugin notices (a cheap stat per `SOCKET_CHECK_INTERVAL`), serves again and registers again.
SIGTERM or SIGINT stops it and removes its socket.

A program of its own (`python -m dra_conformance.rollback.device_plugin`, a host process of the real node): it
imports nothing of the engine, only the kubelet API bindings (dra_wire) and gRPC.

    python -m dra_conformance.rollback.device_plugin --resource example.com/gpu --devices 4
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import grpc

from dra_wire.kubelet_api import BindingsError, KubeletAPI, load

# The kubelet's device-plugin directory and its registration socket (k8s.io/kubelet
# pkg/apis/deviceplugin/v1beta1/constants.go: DevicePluginPath, KubeletSocket).
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
API_VERSION = "v1beta1"
HEALTHY = "Healthy"
# What Allocate puts in a container's environment: its device ids, comma-separated.
DEVICE_IDS_ENV = "DEVICE_PLUGIN_DEVICE_IDS"
# How often the plugin checks whether the kubelet recreated kubelet.sock or removed the plugin's socket: a stat of
# two files, so a second costs nothing and a restarted kubelet sees the resource again within about a second.
SOCKET_CHECK_INTERVAL = 1.0
# One Register call: the kubelet answers once it has dialled the plugin back (milliseconds on one machine).
REGISTER_TIMEOUT = 10.0
# In-flight calls get this long on shutdown; ListAndWatch streams are cancelled.
SHUTDOWN_GRACE = 2.0
# The kubelet calls at most a few RPCs at once (one ListAndWatch stream plus Allocate/preferred allocation).
WORKERS = 4
# An extended resource name: a DNS domain prefix, a slash, a name (the kubelet refuses kubernetes.io domains).
RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class PluginConfig:
    """What the plugin serves and where."""

    resource: str
    devices: int
    plugin_dir: Path = PLUGIN_DIR
    # Default: derived from the resource name (see `socket_name`).
    socket: str = ""
    env_name: str = DEVICE_IDS_ENV

    @property
    def socket_name(self) -> str:
        """The plugin's socket, relative to the plugin dir (the `endpoint` the kubelet dials)."""
        return self.socket or f"fake-{re.sub(r'[^A-Za-z0-9]+', '-', self.resource)}.sock"

    @property
    def socket_path(self) -> Path:
        """The plugin's socket."""
        return self.plugin_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        """The kubelet's registration socket."""
        return self.plugin_dir / KUBELET_SOCKET


# --- what the plugin answers (pure: messages in, messages out) ----------------------------------------------------


def device_ids(resource: str, count: int) -> list[str]:
    """The ids of the plugin's devices: the resource's name part and an index (`example.com/gpu` -> gpu-0...)."""
    return [f"{resource.rsplit('/', 1)[-1]}-{index}" for index in range(count)]


def devices_response(api: KubeletAPI, ids: list[str]) -> Any:
    """A ListAndWatch message listing every device as healthy."""
    messages = api.deviceplugin
    return messages.ListAndWatchResponse(devices=[messages.Device(ID=i, health=HEALTHY) for i in ids])


def allocate_response(api: KubeletAPI, request: Any, known: list[str], env_name: str) -> Any:
    """One answer per container: an environment variable naming its devices; ValueError for a device not ours."""
    messages = api.deviceplugin
    response = messages.AllocateResponse()
    for container in request.container_requests:
        unknown = sorted(set(container.devices_ids) - set(known))
        if unknown:
            raise ValueError(f"unknown device ids {unknown}; this plugin has {known}")
        response.container_responses.add(envs={env_name: ",".join(container.devices_ids)})
    return response


def preferred_allocation(api: KubeletAPI, request: Any) -> Any:
    """Per container: the devices it must include, then the lowest-numbered available ones, up to the size asked."""
    messages = api.deviceplugin
    response = messages.PreferredAllocationResponse()
    for container in request.container_requests:
        chosen = list(dict.fromkeys(container.must_include_deviceIDs))
        rest = sorted(set(container.available_deviceIDs) - set(chosen), key=_device_order)
        chosen += rest[: max(0, container.allocation_size - len(chosen))]
        response.container_responses.add(deviceIDs=chosen[: container.allocation_size])
    return response


def _device_order(device: str) -> tuple[str, int]:
    name, _, index = device.rpartition("-")
    return (name, int(index)) if index.isdigit() else (device, -1)


def register_request(api: KubeletAPI, config: PluginConfig) -> Any:
    """What the plugin tells the kubelet: API version, its socket (relative to the plugin dir), the resource."""
    messages = api.deviceplugin
    return messages.RegisterRequest(
        version=API_VERSION,
        endpoint=config.socket_name,
        resource_name=config.resource,
        options=plugin_options(api),
    )


def plugin_options(api: KubeletAPI) -> Any:
    """No PreStartContainer call needed; GetPreferredAllocation is offered."""
    return api.deviceplugin.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


# --- the service -------------------------------------------------------------------------------------------------


def servicer(api: KubeletAPI, config: PluginConfig, stopping: threading.Event) -> Any:
    """The v1beta1.DevicePlugin service; its ListAndWatch stream ends when `stopping` is set."""
    messages, services = api.deviceplugin, api.deviceplugin_grpc
    ids = device_ids(config.resource, config.devices)

    class Servicer(services.DevicePluginServicer):  # type: ignore[name-defined,misc]
        def GetDevicePluginOptions(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
            return plugin_options(api)

        def ListAndWatch(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
            log(f"ListAndWatch: {len(ids)} healthy devices {ids}")
            yield devices_response(api, ids)
            # The devices never change: keep the stream open (the kubelet treats its end as the plugin going away).
            while context.is_active() and not stopping.wait(SOCKET_CHECK_INTERVAL):
                pass

        def GetPreferredAllocation(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
            return preferred_allocation(api, request)

        def Allocate(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
            try:
                response = allocate_response(api, request, ids, config.env_name)
            except ValueError as error:
                log(f"Allocate refused: {error}")
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            log(f"Allocate: {[list(c.devices_ids) for c in request.container_requests]}")
            return response

        def PreStartContainer(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
            return messages.PreStartContainerResponse()

    return Servicer()


def log(line: str) -> None:
    """One line on stdout (the supervisor or the pod keeps it)."""
    print(f"device-plugin: {line}", flush=True)


def _identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, change time) of a file, or None where there is none.

    A recreated socket may get the inode of the one removed just before; its change time still differs.
    """
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino, found.st_ctime_ns


class DevicePlugin:
    """Serves the plugin socket and keeps the plugin registered with the kubelet of this machine."""

    def __init__(self, api: KubeletAPI, config: PluginConfig) -> None:
        """A plugin for `config`, speaking through the bindings `api`."""
        self.api, self.config = api, config
        self.stopping = threading.Event()
        self.server: grpc.Server | None = None
        # The kubelet.sock the plugin registered with; a different one (or none) means the kubelet restarted.
        self.registered_with: tuple[int, int, int] | None = None
        self.serving: tuple[int, int, int] | None = None

    def serve(self) -> None:
        """(Re)start the gRPC server on the plugin socket; a stale file there is removed first."""
        self._stop_server()
        self.config.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.config.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS))
        self.api.deviceplugin_grpc.add_DevicePluginServicer_to_server(
            servicer(self.api, self.config, self.stopping), server
        )
        server.add_insecure_port(f"unix://{self.config.socket_path}")
        server.start()
        self.server, self.serving = server, _identity(self.config.socket_path)
        log(f"serving {self.config.resource} ({self.config.devices} devices) on {self.config.socket_path}")

    def register(self) -> bool:
        """Register with the kubelet on kubelet.sock; False (and a log line) when it does not answer yet."""
        kubelet = _identity(self.config.kubelet_socket)
        if kubelet is None:
            return False
        with grpc.insecure_channel(f"unix://{self.config.kubelet_socket}") as channel:
            stub = self.api.deviceplugin_grpc.RegistrationStub(channel)
            try:
                stub.Register(register_request(self.api, self.config), timeout=REGISTER_TIMEOUT)
            except grpc.RpcError as error:
                log(f"register with {self.config.kubelet_socket}: {error.code().name}: {error.details()}")
                return False
        self.registered_with = kubelet
        log(f"registered {self.config.resource} with the kubelet ({self.config.kubelet_socket}, {API_VERSION})")
        return True

    def check(self) -> None:
        """Serve again if the socket is gone, and register again with a new kubelet.sock."""
        if self.server is None or _identity(self.config.socket_path) != self.serving:
            log(f"socket {self.config.socket_path} is gone (a kubelet restart cleans the directory): serving again")
            self.serve()
            self.registered_with = None
        kubelet = _identity(self.config.kubelet_socket)
        if kubelet is not None and kubelet != self.registered_with:
            if self.registered_with is not None:
                log(f"{self.config.kubelet_socket} was recreated (the kubelet restarted): registering again")
            self.register()

    def run(self) -> None:
        """Serve and stay registered until `stopping` is set; then stop and remove the socket."""
        try:
            self.serve()
            while True:
                self.check()
                if self.stopping.wait(SOCKET_CHECK_INTERVAL):
                    break
        finally:
            self._stop_server()

    def _stop_server(self) -> None:
        if self.server is not None:
            self.server.stop(SHUTDOWN_GRACE).wait()
            self.server = None
        if self.serving is not None and _identity(self.config.socket_path) == self.serving:
            self.config.socket_path.unlink(missing_ok=True)  # ours; a file someone else made there is left alone
        self.serving = None


def parse_args(argv: list[str] | None = None) -> PluginConfig:
    """Command line -> PluginConfig; bad input exits 2 with one line (argparse)."""
    parser = argparse.ArgumentParser(
        prog="python -m dra_conformance.rollback.device_plugin", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--resource", default="example.com/gpu", help="extended resource (default example.com/gpu)")
    parser.add_argument("--devices", type=int, default=4, help="healthy devices to advertise (default 4)")
    parser.add_argument("--plugin-dir", type=Path, default=PLUGIN_DIR, help=f"default {PLUGIN_DIR}")
    parser.add_argument("--socket", default="", help="socket file name in the plugin dir (default from the resource)")
    parser.add_argument(
        "--env-name",
        default=DEVICE_IDS_ENV,
        help=f"variable naming the ids (default {DEVICE_IDS_ENV})",
    )
    args = parser.parse_args(argv)
    if args.devices < 1:
        parser.error(f"--devices must be at least 1, got {args.devices}")
    domain = args.resource.split("/", 1)[0]
    if not RESOURCE_NAME.fullmatch(args.resource) or domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        parser.error(f"--resource must be an extended resource name like example.com/gpu, got {args.resource!r}")
    if "/" in args.socket or args.socket == KUBELET_SOCKET:
        parser.error(f"--socket must be a file name other than {KUBELET_SOCKET}, got {args.socket!r}")
    if not args.plugin_dir.is_absolute():
        parser.error(f"--plugin-dir must be absolute, got {args.plugin_dir}")
    return PluginConfig(args.resource, args.devices, args.plugin_dir, args.socket, args.env_name)


def main(argv: list[str] | None = None) -> int:
    """Run until SIGTERM/SIGINT."""
    config = parse_args(argv)
    try:
        api = load()
    except BindingsError as error:
        print(f"device plugin: kubelet API bindings: {error}", file=sys.stderr)
        return 1
    plugin = DevicePlugin(api, config)

    def stop(signum: int, _frame: FrameType | None) -> None:
        log(f"{signal.Signals(signum).name}: stopping")
        plugin.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        plugin.run()
    except OSError as error:
        print(f"device plugin: {config.socket_path}: {error.strerror or error}", file=sys.stderr)
        return 1
    log(f"stopped; removed {config.socket_path}" if not os.path.lexists(config.socket_path) else "stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
