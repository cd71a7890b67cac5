"""The reference device plugin as a process: it registers, serves, re-registers after a kubelet restart, and cleans up.

The test plays the kubelet's side of the device plugin API (its `v1beta1.Registration` service on kubelet.sock) in
a private directory; the rollback rehearsal shows the plugin with a real kubelet.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_conformance.kube import waits
from dra_conformance.rollback import device_plugin
from dra_wire.kubelet_api import KubeletAPI, load

# The plugin registers within a second of start (Python start-up and the bindings' import dominate).
REGISTERED = 30.0
# It polls kubelet.sock each second; a few rounds cover a loaded machine.
REREGISTERED = 15.0
# SIGTERM to exit: gRPC shutdown grace (2 s) plus interpreter exit.
EXITED = 15.0
# One RPC to the plugin on this machine.
CALL_DEADLINE = 5.0


class FakeKubelet:
    """The kubelet's registration service on `<dir>/kubelet.sock`; keeps every request it got."""

    def __init__(self, api: KubeletAPI, directory: Path) -> None:
        self.api, self.socket = api, directory / "kubelet.sock"
        self.requests: list[Any] = []
        self.lock = threading.Lock()
        self.server: grpc.Server | None = None

    def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        outer = self

        class Registration(self.api.deviceplugin_grpc.RegistrationServicer):  # type: ignore[name-defined,misc]
            def Register(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
                with outer.lock:
                    outer.requests.append(request)
                return outer.api.deviceplugin.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.api.deviceplugin_grpc.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port(f"unix://{self.socket}")
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(None).wait()
            self.server = None

    def registrations(self) -> list[tuple[str, str, str]]:
        with self.lock:
            return [(r.version, r.endpoint, r.resource_name) for r in self.requests]


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="dp-") as directory:
        yield Path(directory)


def test_plugin_registers_serves_reregisters_and_removes_its_socket(plugin_dir: Path) -> None:
    api = load()
    kubelet = FakeKubelet(api, plugin_dir)
    kubelet.start()
    argv = [sys.executable, "-m", device_plugin.__name__, "--plugin-dir", str(plugin_dir), "--devices", "3"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    socket = plugin_dir / "fake-example-com-gpu.sock"
    try:
        seen = waits.until(
            kubelet.registrations, bool, timeout=REGISTERED, what="the plugin registered with kubelet.sock"
        )
        assert seen == [("v1beta1", socket.name, "example.com/gpu")], seen

        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = api.deviceplugin_grpc.DevicePluginStub(channel)
            stream = stub.ListAndWatch(api.deviceplugin.Empty(), timeout=CALL_DEADLINE)
            listed = [(d.ID, d.health) for d in next(stream).devices]
            stream.cancel()
            assert listed == [("gpu-0", "Healthy"), ("gpu-1", "Healthy"), ("gpu-2", "Healthy")], listed
            request = api.deviceplugin.AllocateRequest(
                container_requests=[api.deviceplugin.ContainerAllocateRequest(devices_ids=["gpu-2"])]
            )
            envs = dict(stub.Allocate(request, timeout=CALL_DEADLINE).container_responses[0].envs)
            assert envs == {"DEVICE_PLUGIN_DEVICE_IDS": "gpu-2"}, envs

        # A kubelet restart: kubelet.sock is recreated and the plugin's socket removed (the kubelet cleans the dir).
        kubelet.stop()
        socket.unlink()
        kubelet.start()
        again = waits.until(
            kubelet.registrations,
            lambda found: len(found) >= 2,
            timeout=REREGISTERED,
            what="the plugin registered again after kubelet.sock was recreated",
        )
        assert again[1] == seen[0], again
        assert waits.until(socket.exists, bool, timeout=REREGISTERED, what=f"{socket} served again")

        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=EXITED)
        output = process.stdout.read() if process.stdout else ""
        assert code == 0, output
        assert not socket.exists(), f"{socket} left after SIGTERM; output: {output}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        kubelet.stop()
