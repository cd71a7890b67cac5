"""The real node: containerd, a kubelet and the reference device plugin on this machine (root only)."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.backends.local import real_node
from dra_conformance.backends.local.build import RealNodeBinaries
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import STARTUP_POLL_CAP, SupervisedCluster, listening
from dra_conformance.errors import BackendError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.pki import CertificateAuthority


class Containerd:
    """containerd of the real node; ready when it answers on its socket."""

    name = "containerd"

    def __init__(self, node: real_node.RealNode) -> None:
        """The containerd of `node`."""
        self.node = node

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """Containerd with the node's config."""
        return [self.node.containerd_process()]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until containerd accepts connections on its socket."""
        socket = self.node.containerd_socket
        waits.until(
            lambda: listening(socket),
            bool,
            timeout=real_node.CONTAINERD_READY,
            what=f"containerd of {real_node.REAL_NODE} answering on {socket}",
            describe=lambda _up: f"not yet; last lines of its log: {cluster.log_tail(self.name)}",
            max_interval=STARTUP_POLL_CAP,
        )


class Kubelet:
    """The kubelet of the real node; ready when its Node is Ready."""

    name = "kubelet"

    def __init__(self, node: real_node.RealNode) -> None:
        """The kubelet of `node`."""
        self.node = node

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """The kubelet with the node's config and credentials."""
        return [self.node.kubelet_process()]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until the node registered and is Ready."""
        with cluster.api() as api_client:
            core = client.CoreV1Api(api_client)

            def condition() -> str:
                found = core.list_node(field_selector=f"metadata.name={real_node.REAL_NODE}", _request_timeout=5)
                conditions = [c for n in found.items for c in n.status.conditions or [] if c.type == "Ready"]
                return f"{conditions[0].status}: {conditions[0].message}" if conditions else "not registered"

            try:
                waits.until(
                    condition,
                    lambda seen: seen.startswith("True"),
                    timeout=cluster.timeouts.node_ready,
                    what=f"real node {real_node.REAL_NODE} Ready",
                    describe=str,
                    retry_on=(ApiException, HTTPError),
                    max_interval=STARTUP_POLL_CAP,
                )
            except WaitTimeout as error:
                raise BackendError(
                    f"start local cluster: {error}; kubelet log: {cluster.log_tail(self.name)}"
                ) from None


class DevicePlugin:
    """The reference device plugin next to the kubelet; ready when the Node's allocatable shows its devices."""

    name = "device-plugin"

    def __init__(self, node: real_node.RealNode) -> None:
        """The device plugin of `node`."""
        self.node = node

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """The device plugin process."""
        return [self.node.device_plugin_process()]

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until the kubelet reports the plugin's devices as allocatable; fail at once if the plugin exits."""
        resource, wanted = real_node.DEVICE_PLUGIN_RESOURCE, str(real_node.DEVICE_PLUGIN_DEVICES)
        with cluster.api() as api_client:
            core = client.CoreV1Api(api_client)

            def allocatable() -> str | None:
                found = core.list_node(field_selector=f"metadata.name={real_node.REAL_NODE}", _request_timeout=5)
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
                    timeout=real_node.DEVICE_PLUGIN_READY,
                    what=f"real node {real_node.REAL_NODE} allocatable {resource}={wanted} from the device plugin",
                    describe=lambda seen: f"allocatable {resource}: {seen}",
                    retry_on=(ApiException, HTTPError),
                    max_interval=STARTUP_POLL_CAP,
                )
            except WaitTimeout as error:
                raise BackendError(
                    f"start local cluster: {error}; device plugin log: {cluster.log_tail(self.name)}; kubelet log: "
                    f"{cluster.log_tail('kubelet')}"
                ) from None


class RealNode:
    """The real node as one component: its files, then containerd, images, the kubelet, the device plugin."""

    name = "real-node"

    def __init__(self, cluster: SupervisedCluster, binaries: RealNodeBinaries, images: tuple[Path, ...] = ()) -> None:
        """The real node of `cluster`, run from `binaries`, with the driver's image archives `images` imported."""
        self.node = real_node.RealNode(cluster.layout, binaries, binaries.pause, real_node.primary_address())
        self.images = images
        self.parts = (Containerd(self.node), Kubelet(self.node), DevicePlugin(self.node))

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """Its processes, in start order."""
        return [spec for part in self.parts for spec in part.command(cluster)]

    def start(self, cluster: SupervisedCluster) -> None:
        """Record the host, write the node's files, start each part once the one before is ready."""
        self.node.record_host()  # before anything changes the host, so a failed start can be undone
        layout = cluster.layout
        self.node.write_files(CertificateAuthority.load(layout.pki / "ca.crt", layout.pki / "ca.key"), cluster.server)
        for part in self.parts:
            cluster.add_processes(part.command(cluster))
            part.ready(cluster)
            if isinstance(part, Containerd):
                # The images the suites' pods and the driver use, before a kubelet could pull them.
                self.node.import_images(self.images)

    def ready(self, cluster: SupervisedCluster) -> None:
        """Ready when its last part is: the device plugin's devices are allocatable."""
        self.parts[-1].ready(cluster)
