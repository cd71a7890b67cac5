"""The fake nodes: Node objects that kwok keeps Ready, each with a loopback address of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_conformance.backends.local.components.kwok import NODE_ANNOTATION, NODE_ANNOTATION_VALUE
from dra_conformance.backends.local.network import node_address
from dra_conformance.backends.local.process_plan import ProcessSpec
from dra_conformance.backends.local.supervised import STARTUP_POLL_CAP, SupervisedCluster
from dra_conformance.kube import waits
from dra_conformance.kube.nodes import ready_node_names
from dra_conformance.model.cluster import SET_ASIDE_TAINT

NODE_LABEL = "dra-conformance.io/local-node"
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
# Nodes a check leases to have the driver under test there to itself (tainted; see SET_ASIDE_TAINT). Two, so that
# the default two xdist workers never wait for one.
SET_ASIDE_NODES = ("kwok-set-aside-0", "kwok-set-aside-1")
# Capacity of each fake node; large so allocation, not CPU or memory, decides scheduling in the suites.
NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110"}


def node_names(count: int) -> tuple[str, ...]:
    """Names of `count` fake nodes, in index order (the set-aside nodes not included)."""
    return tuple(f"kwok-node-{index}" for index in range(count))


def manifest(index: int, name: str) -> dict[str, Any]:
    """The Node object of fake node `name`, the `index`th of the cluster."""
    # Status set at creation is kept for Nodes (kubelets register this way), and kwok's node stage keeps
    # addresses that are already present: so each node keeps its own loopback address.
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                NODE_ANNOTATION: NODE_ANNOTATION_VALUE,
                # Where kwok serves this node's emulated kubelet resource metrics (metrics-server follows it).
                "metrics.k8s.io/resource-metrics-path": f"/metrics/nodes/{name}/metrics/resource",
                # What the TTL controller writes on every node of a cluster under 100 nodes (pkg/controller/ttl):
                # written here, its patch at the controller-manager's start no longer races the node lifecycle
                # controller's taint removal, which then conflicted (409) and was retried 0.1-0.2 s later.
                TTL_ANNOTATION: "0",
            },
            "labels": {
                NODE_LABEL: "true",
                "type": "kwok",
                "kubernetes.io/hostname": name,
                # A kubelet registers with the stable and the beta labels; without the beta ones the node lifecycle
                # controller adds them at start, a write that races its taint removal (409, retried 0.1-0.2 s later).
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
            },
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": node_address(index)},
                {"type": "Hostname", "address": name},
                # kwok serves every node's kubelet endpoints on one loopback listener; metrics-server reaches
                # it with --kubelet-preferred-address-types=ExternalDNS.
                {"type": "ExternalDNS", "address": "localhost"},
            ],
            "capacity": NODE_CAPACITY,
            "allocatable": NODE_CAPACITY,
        },
    }


@dataclass(frozen=True)
class FakeNodes:
    """The regular fake nodes and the tainted set-aside ones; no process of their own (kwok plays them)."""

    regular: tuple[str, ...]
    name: str = "fake-nodes"

    @property
    def all(self) -> tuple[str, ...]:
        """Every fake node: the regular ones, then the set-aside ones."""
        return (*self.regular, *SET_ASIDE_NODES)

    def command(self, cluster: SupervisedCluster) -> list[ProcessSpec]:
        """No process: registering the Node objects is what brings them up."""
        return []

    def register(self, cluster: SupervisedCluster) -> None:
        """Create the Node objects (the set-aside ones tainted)."""
        with cluster.api() as api_client:
            core = client.CoreV1Api(api_client)
            for index, name in enumerate(self.all):
                body = manifest(index, name)
                if name in SET_ASIDE_NODES:
                    body["spec"] = {"taints": [SET_ASIDE_TAINT]}
                core.create_node(body)

    def ready(self, cluster: SupervisedCluster) -> None:
        """Wait until kwok reports every fake node Ready."""
        with cluster.api() as api_client:
            core = client.CoreV1Api(api_client)
            waits.until(
                lambda: ready_node_names(core, NODE_LABEL),
                lambda ready: ready >= set(self.all),
                timeout=cluster.timeouts.node_ready,
                what=f"fake nodes {', '.join(self.all)} Ready",
                describe=lambda r: f"ready: {sorted(r)}",
                retry_on=(ApiException, HTTPError),
                max_interval=STARTUP_POLL_CAP,
            )
