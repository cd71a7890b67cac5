"""The driver under test's kubelet-plugin sockets on nodes real kubelets serve, on a cluster the suite did not build.

Nobody tells the suite where such a node keeps its sockets, or whether it can reach them. A node agent finds the
kubelet root; where the node's file system is this machine's (and `auto` allows it) the sockets are used in place,
elsewhere a relay in the agent's pod carries each connection (see `kubelet.socket_relay`). Either way the node has
a real kubelet, so pods that get claims allocated for socket-level checks are held (`PodHold`).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.driver.real_node import tolerations_of
from dra_conformance.errors import BackendError, WaitTimeout
from dra_conformance.kube.builders import RESOURCE_API, Manifest, PodHold
from dra_conformance.kubelet.node_agent import NodeAgents
from dra_conformance.kubelet.socket_relay import RELAY_PORT, SocketMirror, start_relay
from dra_conformance.model.driver import RELAYED_DIRECTORIES, DriverEndpoint

# One list of the driver's ResourceSlices, selected by driver: the API server answers from its watch cache.
REQUEST_TIMEOUT = 10.0


class SocketAccess(enum.StrEnum):
    """How socket-level checks reach a driver's sockets on a node the suite did not build (`--dra-node-sockets`)."""

    # In place where the node's file system is this machine's, else through the node agent's relay.
    AUTO = "auto"
    # Always through the node agent's relay (what a machine outside the cluster does).
    RELAY = "relay"


@dataclass
class NodeSockets:
    """The driver's sockets the suite reached, per node, and how pods allocating claims for them are held."""

    endpoints: dict[str, DriverEndpoint] = field(default_factory=dict)
    hold: PodHold | None = None
    # Why a node's sockets could not be reached, per node.
    unreachable: dict[str, str] = field(default_factory=dict)
    mirrors: list[SocketMirror] = field(default_factory=list)
    # Per relayed node: how to list its sockets now, and the mirror to keep in step with them.
    relayed: dict[str, tuple[Callable[[], dict[PurePosixPath, int]], SocketMirror]] = field(default_factory=dict)

    def close(self) -> None:
        """Stop relaying (the agents' pods go with their namespace)."""
        for mirror in self.mirrors:
            mirror.close()

    def resync(self, node: str) -> None:
        """Bring the mirror of `node`'s sockets in step with the node (nothing to do where they are not relayed).

        Called before each client of the driver is opened: a driver restarted since names its sockets anew.
        """
        if node in self.relayed:
            listing, mirror = self.relayed[node]
            mirror.sync(listing())

    def why_none(self) -> str:
        """One line on why no socket was reached ("" when some were)."""
        if self.endpoints:
            return ""
        return "; ".join(f"{node}: {why}" for node, why in sorted(self.unreachable.items()))


def nodes_of_driver(api_client: client.ApiClient, driver: str, candidates: tuple[str, ...]) -> tuple[str, ...]:
    """The nodes among `candidates` that the driver publishes node-local ResourceSlices for."""
    group, version = RESOURCE_API.split("/")
    slices = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        group, version, "resourceslices", field_selector=f"spec.driver={driver}", _request_timeout=REQUEST_TIMEOUT
    )
    published = {item["spec"].get("nodeName") for item in slices["items"]}
    return tuple(node for node in candidates if node in published)


def reach_node_sockets(
    api_client: client.ApiClient,
    driver: str,
    nodes: tuple[str, ...],
    agents: NodeAgents,
    image_for: Callable[[Manifest], str],
    relay_binary: Callable[[str], Path],
    access: SocketAccess,
) -> NodeSockets:
    """Reach the driver's sockets on each of `nodes` through its node agent.

    `image_for` picks the agent's image for a node (as the API returns it), `relay_binary` gives the relay built
    for a node architecture (GOARCH). A node whose agent or relay cannot start is recorded as unreachable, why.
    """
    reached = NodeSockets()
    tolerations: list[Manifest] = []
    core = client.CoreV1Api(api_client)
    for name in nodes:
        node = core.read_node(name).to_dict()
        node_tolerations = tolerations_of(node["spec"].get("taints") or [])
        try:
            agent, layout = agents.on(name, image_for(node), node_tolerations)
            if layout.shares_this_machine and access is SocketAccess.AUTO:
                reached.endpoints[name] = DriverEndpoint(driver, name, Path(layout.kubelet_root))
            else:
                architecture = node["status"]["node_info"]["architecture"]
                start_relay(agent, relay_binary(architecture), layout.kubelet_root)
                mirror = SocketMirror(functools.partial(agent.port_forward, RELAY_PORT), layout.kubelet_root, name)
                reached.mirrors.append(mirror)
                listing = functools.partial(agent.sockets_under, layout.kubelet_root, RELAYED_DIRECTORIES)
                mirror.sync(listing())
                endpoint = DriverEndpoint(driver, name, mirror.directory, node_kubelet_root=layout.kubelet_root)
                # One connection through the relay before any check relies on it: a relay that cannot carry one
                # makes the node unreachable, with its reason, instead of failing checks of the driver.
                problem = mirror.probe(PurePosixPath(endpoint.reachable_on_node(endpoint.registration_socket)))
                if problem is not None:
                    raise BackendError(f"the node agent's relay does not carry a connection: {problem}")
                reached.endpoints[name] = endpoint
                reached.relayed[name] = (listing, mirror)
        except (BackendError, WaitTimeout, ApiException) as error:
            reached.unreachable[name] = str(error).splitlines()[0]
            continue
        tolerations += [t for t in node_tolerations if t not in tolerations]
    if reached.endpoints:
        reached.hold = PodHold(tuple(reached.endpoints), tuple(tolerations))
    return reached
