"""Declared capabilities on a real node, where the kubelet prepares: status.devices, adminAccess, extended resources.

The allocation and status suites exercise these capabilities on fake nodes, where the suite plays the kubelet. A
driver that runs on real nodes only (`nodes: realOnly`, fixed kubelet paths) never gets there, so its declared
capabilities would go unexercised; here the node's own kubelet prepares the claims and the suite observes, as it
does for every driver on a real node.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.driver.profile import Capability
from dra_conformance.driver.real_node import RealNodeTarget, await_ready, claimed_pod, pod_on
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder, ClaimUse
from dra_conformance.kube.device_taints import DeviceSelection, allocated_devices
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.findings import Obligations
from dra_conformance.scenarios.runner import ADMIN_ACCESS_LABEL
from dra_conformance.timeouts import Timeouts

pytestmark = pytest.mark.xdist_group("real-node")

# The domain of the extended resource names the check gives its DeviceClasses (one per check, never reused).
EXTENDED_RESOURCE_DOMAIN = "conformance.dra.example.com"


def _require(driver: DriverUnderTest, capability: Capability) -> None:
    if not driver.profile.declares(capability):
        pytest.skip(f"not applicable: {capability} not declared")


def _claim(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    group, version = RESOURCE_API.split("/")
    return dict(
        client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            group, version, namespace, "resourceclaims", name
        )
    )


def _allocated(api_client: client.ApiClient, namespace: str, name: str) -> list[dict[str, Any]]:
    """The claim's allocation results as the API writes them (adminAccess included; empty while unallocated)."""
    status = _claim(api_client, namespace, name).get("status") or {}
    return list(((status.get("allocation") or {}).get("devices") or {}).get("results") or [])


@pytest.mark.capability(Capability.STATUS_DEVICES.value)
def test_a_driver_declaring_status_devices_writes_them_for_the_claim_the_kubelet_prepared(
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    _require(driver_under_test, Capability.STATUS_DEVICES)
    pod, claim = claimed_pod(tracker, build, real_node)
    await_ready(api_client, namespace, pod["metadata"]["name"], timeouts.pod_running, "pod with a claim Ready")
    name = claim["metadata"]["name"]

    def entries() -> tuple[set[DeviceSelection], set[DeviceSelection]]:
        read = _claim(api_client, namespace, name)
        allocated = {d for d in allocated_devices(read) if d.driver == driver_under_test.name}
        reported = {DeviceSelection(d["driver"], d["pool"], d["device"]) for d in read["status"].get("devices") or []}
        return allocated, reported

    try:
        waits.until(
            entries,
            lambda seen: bool(seen[0]) and seen[0] <= seen[1],
            timeout=timeouts.status_written,
            what=f"status.devices of claim {name} naming every device the driver was allocated",
            describe=lambda seen: f"allocated {sorted(map(str, seen[0]))}, status.devices {sorted(map(str, seen[1]))}",
        )
    except WaitTimeout as error:
        obligations.fail("status.declared-status-written", str(error), f"claim {name} on {real_node.name}")


@pytest.mark.capability(Capability.ADMIN_ACCESS.value)
def test_an_admin_access_claim_gets_prepared_beside_the_workload_that_holds_every_device(
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    _require(driver_under_test, Capability.ADMIN_ACCESS)
    client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}})
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    every_device = driver_under_test.profile.devices.per_node
    workload = tracker.create(build.claim(device_class, count=every_device))
    monitor_spec = {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class, "adminAccess": True}}]}
    }
    monitor = tracker.create(build.claim_from_spec(monitor_spec, prefix="monitor"))
    where = f"node {real_node.name}, {every_device} devices"
    pods = []
    for claim in (workload, monitor):
        uses = [ClaimUse("devices", claim=claim["metadata"]["name"])]
        pods.append(tracker.create(pod_on(build, real_node, uses))["metadata"]["name"])
    for pod, role in zip(pods, ("the workload holding every device", "the admin-access monitor"), strict=True):
        try:
            await_ready(api_client, namespace, pod, timeouts.pod_running, f"pod {pod} ({role}) Ready")
        except WaitTimeout as error:
            obligations.fail("kubelet.admin-access-claim-prepared-beside-workload", str(error), where)
    held = {r["device"] for r in _allocated(api_client, namespace, workload["metadata"]["name"])}
    watched = _allocated(api_client, namespace, monitor["metadata"]["name"])
    obligations.check(
        "kubelet.admin-access-claim-prepared-beside-workload",
        bool(watched) and all(r.get("adminAccess") and r["device"] in held for r in watched),
        f"monitor allocated {watched}; the workload holds {sorted(held)}",
        where,
    )


@pytest.mark.capability(Capability.EXTENDED_RESOURCE_MAPPING.value)
def test_a_pod_asking_for_the_extended_resource_of_a_device_class_runs_with_a_device_of_the_driver(
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    _require(driver_under_test, Capability.EXTENDED_RESOURCE_MAPPING)
    resource = f"{EXTENDED_RESOURCE_DOMAIN}/gpu-{secrets.token_hex(4)}"
    device_class = build.device_class()
    device_class["spec"]["extendedResourceName"] = resource
    tracker.create(device_class)
    pod = pod_on(build, real_node, [])
    pod["spec"].pop("resourceClaims")
    pod["spec"]["containers"][0]["resources"] = {"requests": {resource: "1"}, "limits": {resource: "1"}}
    name = tracker.create(pod)["metadata"]["name"]
    where = f"node {real_node.name}, extended resource {resource}"
    try:
        ready = await_ready(
            api_client, namespace, name, timeouts.pod_running, f"pod {name} asking for {resource} Ready"
        )
    except WaitTimeout as error:
        obligations.fail("kubelet.extended-resource-pod-runs", str(error), where)
    claim_status = ready.status.extended_resource_claim_status
    claim_name = claim_status.resource_claim_name if claim_status is not None else None
    results = _allocated(api_client, namespace, claim_name) if claim_name else []
    obligations.check(
        "kubelet.extended-resource-pod-runs",
        bool(results) and all(r["driver"] == driver_under_test.name for r in results),
        f"the pod's extended-resource claim {claim_name}: allocated {results}",
        where,
    )
