"""The kubelet's count of a driver's claims in use on a node, held against the claims the API says are in use there.

`dra_resource_claims_in_use` (`dra_metrics`) counts a claim from the driver's NodePrepareResources to its
successful NodeUnprepareResources, so a count above the driver's claims still reserved for pods on the node is a
claim whose unprepare never succeeded. Other checks may use the node at the same time, so a reading is held to the
claims reserved there, read from the API in the same poll, never to a fixed number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kubelet import dra_metrics

# The gauge is computed from the kubelet's claim cache on each scrape, and the cache holds a claim from its prepare
# (before the container starts) to its unprepare (before the pod is removed): a reading follows at once. 30 s covers
# a scrape through the API server's node proxy on a busy machine, and the unprepare of a pod whose deletion the API
# server finished a moment before the kubelet's cache caught up.
CLAIMS_IN_USE_DEADLINE = 30.0


@dataclass(frozen=True)
class InUse:
    """One poll: the kubelet's gauge for the driver and the driver's claims reserved for pods on the node."""

    gauge: float | None
    reserved: tuple[str, ...]
    why: str = ""

    def __str__(self) -> str:
        gauge = f"{self.gauge:g}" if self.gauge is not None else f"unread ({self.why})"
        return f"dra_resource_claims_in_use {gauge}; claims reserved for pods on the node {list(self.reserved)}"

    def no_more_than_reserved(self) -> bool:
        """Whether the kubelet counts no claim of the driver beyond those reserved on the node (False: unread)."""
        return self.gauge is not None and self.gauge <= len(self.reserved)


def reserved_on_node(api_client: client.ApiClient, driver: str, node: str) -> tuple[str, ...]:
    """The driver's claims (namespace/name) reserved for a pod that exists on `node`."""
    pods = client.CoreV1Api(api_client).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    uids = {pod.metadata.uid for pod in pods}
    group, version = RESOURCE_API.split("/")
    claims = client.CustomObjectsApi(api_client).list_cluster_custom_object(group, version, "resourceclaims")["items"]
    reserved = []
    for claim in claims:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        if not any(result.get("driver") == driver for result in results):
            continue
        if any(ref.get("resource") == "pods" and ref.get("uid") in uids for ref in status.get("reservedFor") or []):
            reserved.append(f"{claim['metadata']['namespace']}/{claim['metadata']['name']}")
    return tuple(sorted(reserved))


def read(api_client: client.ApiClient, driver: str, node: str) -> InUse:
    """The kubelet's gauge for `driver` on `node` and the driver's claims reserved there, now."""
    reading, why = dra_metrics.read(api_client, node)
    reserved = reserved_on_node(api_client, driver, node)
    # The kubelet exports a driver's gauge only while it holds a claim of the driver: none reads as 0.
    return InUse(None if reading is None else reading.claims_in_use.get(driver, 0.0), reserved, why)


def await_settled(
    api_client: client.ApiClient,
    driver: str,
    node: str,
    settled: Callable[[InUse], bool],
    what: str,
    deadline: float = CLAIMS_IN_USE_DEADLINE,
) -> InUse:
    """The first poll that `settled` accepts within `deadline` seconds, else the last one."""
    try:
        found: InUse = waits.until(
            lambda: read(api_client, driver, node), settled, timeout=deadline, what=what, describe=str
        )
        return found
    except WaitTimeout:
        return read(api_client, driver, node)
