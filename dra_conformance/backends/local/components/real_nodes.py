"""The real nodes: containerd and a kubelet each, the reference device plugin on the first (root only).

Node 0 runs in this machine's namespaces; each further node in its own mount and network namespaces
(`node_namespace`), with the API server relayed onto its loopback (`api_relay`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.backends.local import real_node_host
from dra_conformance.backends.local.build import RealNodeBinaries
from dra_conformance.backends.local.node_namespace import NodeNamespace
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import STARTUP_POLL_CAP, SupervisedCluster
from dra_conformance.errors import BackendError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.pki import CertificateAuthority
from dra_conformance.processes import listening

# One probe: an interpreter's start and a connect on loopback, on a loaded machine.
RELAY_PROBE_TIMEOUT = 10.0


class Containerd:
    """containerd of the real node; ready when it answers on its socket."""

    def __init__(self, node: real_node_host.RealNode) -> None:
        """The containerd of `node`."""
        self.node = node
        self.name = real_node_host.process_name("containerd", node.name)

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """Containerd with the node's config."""
        return [self.node.containerd_process()]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until containerd accepts connections on its socket."""
        socket = self.node.containerd_socket
        waits.until(
            lambda: listening(socket),
            bool,
            timeout=real_node_host.CONTAINERD_READY,
            what=f"containerd of {self.node.name} answering on {socket}",
            describe=lambda _up: f"not yet; last lines of its log: {cluster.log_tail(self.name)}",
            max_interval=STARTUP_POLL_CAP,
        )


class Kubelet:
    """The kubelet of the real node; ready when its Node is Ready."""

    def __init__(self, node: real_node_host.RealNode) -> None:
        """The kubelet of `node`."""
        self.node = node
        self.name = real_node_host.process_name("kubelet", node.name)

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """The kubelet with the node's config and credentials."""
        return [self.node.kubelet_process()]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until the node registered and is Ready."""
        with cluster.api() as api_client:
            core = client.CoreV1Api(api_client)

            def condition() -> str:
                found = core.list_node(field_selector=f"metadata.name={self.node.name}", _request_timeout=5)
                conditions = [c for n in found.items for c in n.status.conditions or [] if c.type == "Ready"]
                return f"{conditions[0].status}: {conditions[0].message}" if conditions else "not registered"

            try:
                waits.until(
                    condition,
                    lambda seen: seen.startswith("True"),
                    timeout=cluster.timeouts.node_ready,
                    what=f"real node {self.node.name} Ready",
                    describe=str,
                    retry_on=(ApiException, HTTPError),
                    max_interval=STARTUP_POLL_CAP,
                )
            except WaitTimeout as error:
                raise BackendError(
                    f"start local cluster: {error}; kubelet log: {cluster.log_tail(self.name)}"
                ) from None


class ApiRelay:
    """For a further node: the API server on the node's loopback; ready when it answers there."""

    def __init__(self, node: real_node_host.RealNode, port: int) -> None:
        """The relay of `node` for the API server's `port`."""
        assert node.namespace is not None
        self.node, self.port, self.namespace = node, port, node.namespace
        self.name = real_node_host.process_name("api-relay", node.name)

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """The relay process."""
        return [self.node.api_relay_process(self.port)]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until a connection from inside the node's network namespace reaches the API server's port."""
        connect = f"import socket; socket.create_connection(('127.0.0.1', {self.port}), 2)"
        probe = self.namespace.wrap([sys.executable, "-c", connect])
        waits.until(
            lambda: _answers(probe) or cluster.exit_code(self.name),
            lambda seen: seen is True,
            timeout=real_node_host.CONTAINERD_READY,
            what=f"the API server reachable on {self.node.name}'s loopback",
            describe=lambda code: f"the relay exited with {code}: {cluster.log_tail(self.name)}" if code else "not yet",
            max_interval=STARTUP_POLL_CAP,
        )


def _answers(probe: list[str]) -> bool:
    return subprocess.run(probe, capture_output=True, check=False, timeout=RELAY_PROBE_TIMEOUT).returncode == 0


class DevicePlugin:
    """The reference device plugin next to the kubelet; ready when the Node's allocatable shows its devices."""

    name = "device-plugin"

    def __init__(self, node: real_node_host.RealNode) -> None:
        """The device plugin of `node`."""
        self.node = node

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """The device plugin process."""
        return [self.node.device_plugin_process()]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until the kubelet reports the plugin's devices as allocatable; fail at once if the plugin exits."""
        resource, wanted = real_node_host.DEVICE_PLUGIN_RESOURCE, str(real_node_host.DEVICE_PLUGIN_DEVICES)
        with cluster.api() as api_client:
            core = client.CoreV1Api(api_client)

            def allocatable() -> str | None:
                found = core.list_node(field_selector=f"metadata.name={real_node_host.REAL_NODE}", _request_timeout=5)
                code = cluster.exit_code(self.name)
                if code is not None:
                    raise BackendError(
                        f"start local cluster: the device plugin exited with code {code}; last lines "
                        f"of its log: {cluster.log_tail(self.name)}"
                    )
                return next(((n.status.allocatable or {}).get(resource) for n in found.items), None)

            try:
                waits.until(
                    allocatable,
                    lambda seen: seen == wanted,
                    timeout=real_node_host.DEVICE_PLUGIN_READY,
                    what=f"real node {real_node_host.REAL_NODE} allocatable {resource}={wanted} from the device plugin",
                    describe=lambda seen: f"allocatable {resource}: {seen}",
                    retry_on=(ApiException, HTTPError),
                    max_interval=STARTUP_POLL_CAP,
                )
            except WaitTimeout as error:
                raise BackendError(
                    f"start local cluster: {error}; device plugin log: {cluster.log_tail(self.name)}; kubelet log: "
                    f"{cluster.log_tail('kubelet')}"
                ) from None


class RealNodes:
    """The real nodes as one component: their files, then containerd and images, the kubelets, the device plugin."""

    name = "real-node"

    def __init__(
        self, cluster: SupervisedCluster, binaries: RealNodeBinaries, images: tuple[Path, ...] = (), count: int = 1
    ) -> None:
        """`count` real nodes of `cluster`, run from `binaries`, with the driver's image archives `images` imported."""
        address = real_node_host.primary_address()
        further = [NodeNamespace.of(cluster.layout, real_node_host.node_name(i), i) for i in range(1, count)]
        self.namespaces = further
        self.nodes = [
            real_node_host.RealNode(cluster.layout, binaries, binaries.pause, address),
            *(real_node_host.RealNode(cluster.layout, binaries, binaries.pause, address, ns) for ns in further),
        ]
        self.images = images
        port = urlsplit(cluster.server).port or 443
        self.containerds = [Containerd(node) for node in self.nodes]
        self.relays = [ApiRelay(node, port) for node in self.nodes if node.namespace is not None]
        self.kubelets = [Kubelet(node) for node in self.nodes]
        self.device_plugin = DevicePlugin(self.nodes[0])

    @property
    def names(self) -> tuple[str, ...]:
        """The nodes' names, node 0 first."""
        return tuple(node.name for node in self.nodes)

    def start(self, cluster: SupervisedCluster) -> None:
        """Record the host, make the further nodes' namespaces, then start each stage once the one before is ready."""
        self.nodes[0].record_host()  # before anything changes the host, so a failed start can be undone
        # Before any kubelet runs: a namespace copies the host's mounts as they are when it is made.
        for namespace in self.namespaces:
            namespace.create()
        layout = cluster.layout
        authority = CertificateAuthority.load(layout.pki / "ca.crt", layout.pki / "ca.key")
        for node in self.nodes:
            node.write_files(authority, cluster.server)
        stages: list[list[Containerd] | list[ApiRelay] | list[Kubelet] | list[DevicePlugin]] = [
            self.containerds,
            self.relays,
            self.kubelets,
            [self.device_plugin],
        ]
        for stage in stages:
            cluster.add_processes([spec for part in stage for spec in part.command(cluster)])
            for part in stage:
                part.ready(cluster)
            if stage is self.containerds:
                # The images the suites' pods and the driver use, before a kubelet could pull them.
                for node in self.nodes:
                    node.import_images(self.images)

    def ready(self, cluster: SupervisedCluster) -> None:
        """Ready when its last part is: the device plugin's devices are allocatable."""
        self.device_plugin.ready(cluster)
