"""The real API server confines a driver's status.devices writes to claims allocated to its own node.

The identity is the reference driver's ServiceAccount with its least-privilege RBAC (deploy/rbac.yaml), its
token bound to a pod on node A, as a DaemonSet pod's token would be.
"""

from __future__ import annotations

from typing import Any

import allure
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.driver.identity import DriverIdentity
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.claims import ready_device_status
from dra_conformance.kube.client import status_message
from dra_conformance.kube.identities import token_client
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.timeouts import Timeouts


def _apply_device_status(api: client.ApiClient, claim: AllocatedClaim, driver: str) -> None:
    meta = claim.claim["metadata"]
    result = claim.results[0]
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
        "status": {
            "devices": [
                ready_device_status(driver, result["pool"], result["device"], reason="Prepared", message="test")
            ]
        },
    }
    client.ResourceV1Api(api).patch_namespaced_resource_claim_status(
        meta["name"],
        meta["namespace"],
        body,
        field_manager=driver,
        force=True,
        _content_type="application/apply-patch+yaml",
    )


@pytest.fixture
def claims_on_two_nodes(
    cluster: ClusterInfo, tracker: ResourceTracker, namespace: str, api_client: client.ApiClient, timeouts: Timeouts
) -> tuple[Builder, dict[str, Any]]:
    if len(cluster.nodes) < 2:
        pytest.skip("needs two nodes")
    build = Builder(namespace=namespace, driver=f"authz-{namespace.rsplit('-', 1)[1]}.example.com")
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    claims = {}
    for node in cluster.nodes[:2]:
        tracker.create(build.resource_slice(node, devices=1))
        claims[node] = allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled, node=node)
    return build, claims


def test_driver_on_node_a_cannot_write_status_devices_of_a_claim_on_node_b(
    claims_on_two_nodes: tuple[Builder, dict[str, AllocatedClaim]],
    cluster: ClusterInfo,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    build, claims = claims_on_two_nodes
    node_a, node_b = cluster.nodes[:2]
    identity = DriverIdentity(tracker, api_client, namespace, build.driver)
    with token_client(api_client, identity.token_for(node_a)) as as_driver_on_a:
        _apply_device_status(as_driver_on_a, claims[node_a], build.driver)  # its own node: allowed
        with pytest.raises(ApiException) as denied:
            _apply_device_status(as_driver_on_a, claims[node_b], build.driver)
    message = status_message(denied.value)
    allure.attach(message, "denial text", allure.attachment_type.TEXT)
    print(f"\ndenial ({denied.value.status}): {message}")
    # The check runs in the claim status strategy, so the denial is a Forbidden field error: 422 Invalid.
    assert denied.value.status == 422, f"HTTP {denied.value.status}: {message}"
    assert 'changing status.devices requires resource="resourceclaims/driver"' in message, message
    assert "arbitrary-node:patch" in message, message


def test_driver_cannot_write_status_devices_for_another_driver_name(
    claims_on_two_nodes: tuple[Builder, dict[str, AllocatedClaim]],
    cluster: ClusterInfo,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    build, claims = claims_on_two_nodes
    node_a = cluster.nodes[0]
    identity = DriverIdentity(tracker, api_client, namespace, f"not-{build.driver}")  # RBAC for another name
    with token_client(api_client, identity.token_for(node_a)) as as_other_driver:
        with pytest.raises(ApiException) as denied:
            _apply_device_status(as_other_driver, claims[node_a], build.driver)
    message = status_message(denied.value)
    assert 'requires resource="resourceclaims/driver"' in message, f"HTTP {denied.value.status}: {message}"
