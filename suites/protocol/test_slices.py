"""Where the driver's ResourceSlices say its devices are.

A kubelet plugin publishes the devices of the node it runs on: a slice bound to a node (spec.nodeName) offers its
devices to pods scheduled there. A slice bound to a node that does not exist is never cleaned up by any kubelet
(the kubelet wipes only its own node's slices) and says nothing true.
"""

from __future__ import annotations

from kubernetes import client

from dra_conformance.driver.endpoint import DriverUnderTest
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.report.findings import Obligations

# One LIST of slices or nodes the API server answers from its watch cache.
LIST_TIMEOUT = 10.0


def test_driver_binds_its_slices_only_to_nodes_that_exist(
    driver_under_test: DriverUnderTest, api_client: client.ApiClient, obligations: Obligations
) -> None:
    group, version = RESOURCE_API.split("/")
    slices = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        group,
        version,
        "resourceslices",
        field_selector=f"spec.driver={driver_under_test.name}",
        _request_timeout=LIST_TIMEOUT,
    )["items"]
    nodes = {node.metadata.name for node in client.CoreV1Api(api_client).list_node(_request_timeout=LIST_TIMEOUT).items}
    bound = {item["metadata"]["name"]: item["spec"]["nodeName"] for item in slices if item["spec"].get("nodeName")}
    stray = sorted(f"{name} -> {node}" for name, node in bound.items() if node not in nodes)
    obligations.check(
        "protocol.slices-bound-to-existing-nodes",
        not stray,
        f"slices bound to no existing node: {stray}; nodes {sorted(nodes)}",
        f"driver {driver_under_test.name}",
    )
