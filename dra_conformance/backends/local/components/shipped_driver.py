"""The driver under test as its vendor ships it: its manifests applied, its pods on the real node, ready when it is."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import client

from dra_conformance.backends.local import driver_daemonset, install_placement, install_record, real_node_host, shipped
from dra_conformance.backends.local.components.driver import await_driver
from dra_conformance.backends.local.layout import ClusterLayout
from dra_conformance.backends.local.supervised import SupervisedCluster
from dra_conformance.driver.profile import DriverProfile
from dra_conformance.model.driver import DriverEndpoint


class ShippedDriver:
    """The profile's `install` on `nodes` (the real ones): images already imported, manifests applied here."""

    name = "shipped-driver"

    def __init__(
        self, profile: DriverProfile, layout: ClusterLayout, nodes: tuple[str, ...], echo: Callable[[str], None]
    ) -> None:
        """Install the driver of `profile` and wait for it on `nodes`, printing the transformations through `echo`."""
        assert profile.install is not None, "only for a profile with `install`"
        self.profile, self.spec, self.layout, self.nodes, self.echo = profile, profile.install, layout, nodes, echo

    @property
    def endpoints(self) -> list[DriverEndpoint]:
        """Where the driver registers on each node: the node's standard kubelet root and CDI directory."""
        return [real_node_host.standard_endpoint(self.layout, self.profile.driver, n) for n in self.nodes]

    def start(self, cluster: SupervisedCluster) -> list[DriverEndpoint]:
        """Apply the manifests and wait until the driver registered with a complete pool on every node."""
        with cluster.api() as api_client:
            installed = shipped.install(
                api_client,
                self.spec,
                self.nodes,
                self.echo,
                before_apply=lambda documents: install_record.take(cluster.layout, documents, self.echo),
            )
            # For the run's summary (`ClusterInfo.install_transforms`): what was changed in the vendor's manifests.
            shipped.record_transforms(cluster.layout, installed.transformations)
            # For the upgrade check (`ClusterInfo.previous_release`): the release to roll to and back from.
            shipped.record_previous_release(cluster.layout, installed.previous)
            core = client.CoreV1Api(api_client)
            for endpoint in self.endpoints:

                def failed(node: str = endpoint.node) -> str | None:
                    failure = shipped.driver_pod_failure(core, self.profile.driver, installed.pod_namespaces, node)
                    if failure is not None:
                        return failure
                    # A DaemonSet that cannot ever run a pod there (an untolerated lasting taint) ends the wait now.
                    daemonsets, blocked = install_placement.daemonsets_on_node(api_client, installed.daemonsets, node)
                    kept_off = " | ".join(daemonsets)
                    return (
                        f"driver {self.profile.driver} on {node}: no pod of it can run there: {kept_off}"
                        if blocked
                        else None
                    )

                def log(node: str = endpoint.node) -> str:
                    pods = [
                        pod
                        for namespace in installed.pod_namespaces
                        for pod in core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
                    ]
                    if pods:
                        return driver_daemonset.log_tail(core, pods[-1])
                    daemonsets, _ = install_placement.daemonsets_on_node(api_client, installed.daemonsets, node)
                    return f"no pod of the driver on {node}" + (f": {' | '.join(daemonsets)}" if daemonsets else "")

                await_driver(cluster, api_client, self.profile, endpoint, failed, log)
        return self.endpoints
