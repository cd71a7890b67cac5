"""Disrupting the driver under test on a node leased for it: kill or stop its process, start it again."""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml
from kubernetes import client

from dra_conformance.kube.builders import Builder, Manifest
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.model.cluster import SET_ASIDE_TOLERATION, DriverProcesses, DriverTermination
from dra_conformance.model.driver import DriverEndpoint


@dataclass
class Disruption:
    """The driver under test on a leased set-aside node, which no other test's pod lands on."""

    node: str
    endpoint: DriverEndpoint
    processes: DriverProcesses
    killed: bool = False
    # The profile build running now when it is not the driver's own (`run.versions`), e.g. "previous".
    build: str | None = None
    # Pods of a disruption check tolerate the node's taint to land there: the set-aside one, or a real node's.
    toleration: Manifest = field(default_factory=lambda: dict(SET_ASIDE_TOLERATION))
    # Whether the driver reads its API server from a kubeconfig the suite can rewrite (`route_through`): not so for
    # a driver installed as DaemonSet pods.
    reroutable: bool = True
    _original_server: str | None = None

    def allocate(
        self, tracker: ResourceTracker, build: Builder, api_client: client.ApiClient, device_class: str, timeout: float
    ) -> AllocatedClaim:
        """One claim allocated on this node by the scheduler, its pod tolerating the set-aside taint."""
        return allocate(
            tracker, build, api_client, device_class, timeout=timeout, node=self.node, tolerations=(self.toleration,)
        )

    def kill(self) -> int:
        """SIGKILL the driver's process on the node; returns its exit status."""
        self.killed = True
        return self.processes.kill_driver(self.node)

    def terminate(self) -> int | None:
        """SIGTERM the driver's process on the node, as the kubelet stops its pod; its exit status.

        None where the backend can only SIGKILL it (nothing stopped then).
        """
        if not isinstance(self.processes, DriverTermination):
            return None
        self.killed = True
        return self.processes.terminate_driver(self.node)

    def start(self, build: str | None = None) -> None:
        """Start the driver again (another `build` of its profile where named) and wait for a complete pool."""
        try:
            self.processes.start_driver(self.node, build)
        finally:
            # Also when its wait failed: the process may run without a pool, and the next kill must stop it.
            self.killed, self.build = False, build

    def back_to_own_build(self) -> None:
        """Run the driver's own build again if another one runs (or none does)."""
        if self.build is not None and not self.killed:
            self.kill()
        if self.killed:
            self.start()

    def route_through(self, server: str) -> None:
        """Restart the driver with its API server at `server` (a proxy); `restore` undoes it."""
        self._set_server(server)
        self.kill()
        self.start()

    def restore(self) -> None:
        """Restart the driver talking to the API server directly again."""
        if self._original_server is not None:
            self._set_server(self._original_server)
            self._original_server = None
            self.kill()
            self.start()

    def _set_server(self, server: str) -> None:
        path = self.processes.driver_kubeconfig(self.node)
        document = yaml.safe_load(path.read_text())
        if self._original_server is None:
            self._original_server = document["clusters"][0]["cluster"]["server"]
        document["clusters"][0]["cluster"]["server"] = server
        path.write_text(yaml.safe_dump(document, sort_keys=False))
