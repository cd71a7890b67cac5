"""Protocol checks every DRA driver must pass through its kubelet-plugin sockets (the csi-sanity of DRA).

Claims are allocated by the real scheduler; the test then plays the kubelet of the node they landed on.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.backends.base import ClusterInfo
from dra_conformance.driver.endpoint import DriverUnderTest
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_condition, device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.kubelet.client import ClaimRef, DriverClient
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.timeouts import Timeouts

# Claims prepared at once in the concurrency check; below the reference driver's 8 devices per node so that
# parallel tests on the other worker still find free devices.
CONCURRENT_CLAIMS = 4


@pytest.fixture
def build(namespace: str, driver_under_test: DriverUnderTest) -> Builder:
    return Builder(namespace=namespace, driver=driver_under_test.name)


@pytest.fixture
def device_class(tracker: ResourceTracker, build: Builder) -> str:
    return str(tracker.create(build.device_class())["metadata"]["name"])


@pytest.fixture
def allocated(
    tracker: ResourceTracker, build: Builder, api_client: client.ApiClient, device_class: str, timeouts: Timeouts
) -> AllocatedClaim:
    return allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled)


def _device_status(tracker: ResourceTracker, claim: AllocatedClaim) -> list[dict[str, Any]]:
    meta = claim.claim["metadata"]
    return device_statuses(tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))


def test_registration_info_names_the_driver_and_a_supported_version(
    driver_under_test: DriverUnderTest, driver_client: Callable[..., DriverClient]
) -> None:
    for node, endpoint in driver_under_test.endpoints.items():
        info = driver_client(endpoint).get_info()
        assert info.type == "DRAPlugin", f"{node}: type {info.type!r}"
        assert info.name == driver_under_test.name, f"{node}: name {info.name!r}"
        assert "v1.DRAPlugin" in info.supported_versions, f"{node}: versions {list(info.supported_versions)}"
        assert info.endpoint, f"{node}: empty endpoint in {info}"


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_and_unprepare_are_idempotent(
    version: str,
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
) -> None:
    endpoint = driver_under_test.endpoints[allocated.node]
    first = kubelet.prepare(endpoint, [allocated.ref], version=version).claims[allocated.ref.uid]
    again = kubelet.prepare(endpoint, [allocated.ref], version=version).claims[allocated.ref.uid]
    assert not first.error and first.devices, f"first prepare: {first}"
    assert again == first, f"second prepare differs: {again} vs {first}"
    expected = sorted((r["pool"], r["device"]) for r in allocated.results)
    assert sorted((d["poolName"], d["deviceName"]) for d in first.devices) == expected, first.devices
    assert all(d["cdiDeviceIDs"] for d in first.devices), f"devices without CDI IDs: {first.devices}"

    for attempt in ("first", "second"):
        answer = kubelet.unprepare(endpoint, [allocated.ref], version=version).claims[allocated.ref.uid]
        assert not answer.error, f"{attempt} unprepare: {answer.error}"


def test_prepare_writes_status_devices_and_unprepare_removes_them(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    tracker: ResourceTracker,
) -> None:
    assert _device_status(tracker, allocated) == [], "status.devices set before any prepare"
    endpoint = driver_under_test.endpoints[allocated.node]
    answer = kubelet.prepare(endpoint, [allocated.ref]).claims[allocated.ref.uid]
    assert not answer.error, answer.error

    entries = _device_status(tracker, allocated)
    expected = sorted((r["driver"], r["pool"], r["device"]) for r in allocated.results)
    assert sorted((e["driver"], e["pool"], e["device"]) for e in entries) == expected, entries
    for entry in entries:
        ready = device_condition(entry, "Ready")
        assert ready is not None and ready["status"] == "True", f"Ready condition of {entry['device']}: {entry}"

    assert not kubelet.unprepare(endpoint, [allocated.ref]).claims[allocated.ref.uid].error
    assert _device_status(tracker, allocated) == [], "status.devices left after unprepare"


def test_unknown_claim_gets_a_per_claim_error(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    namespace: str,
) -> None:
    unknown = ClaimRef(namespace, str(uuid.uuid4()), "no-such-claim")
    endpoint = driver_under_test.endpoints[allocated.node]
    answers = kubelet.prepare(endpoint, [allocated.ref, unknown]).claims
    assert answers[unknown.uid].error, f"unknown claim was prepared: {answers[unknown.uid]}"
    assert not answers[allocated.ref.uid].error, f"the valid claim failed too: {answers[allocated.ref.uid].error}"


def test_claim_allocated_to_another_node_gets_a_per_claim_error(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
) -> None:
    other = next((n for n in driver_under_test.endpoints if n != allocated.node), None)
    if other is None:
        pytest.skip("the driver runs on one node only")
    answer = kubelet.prepare(driver_under_test.endpoints[other], [allocated.ref]).claims[allocated.ref.uid]
    assert answer.error, f"node {other} prepared a claim allocated to {allocated.node}: {answer}"


def test_claim_allocated_to_another_driver_gets_a_per_claim_error(
    cluster: ClusterInfo,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    namespace: str,
    api_client: client.ApiClient,
    timeouts: Timeouts,
) -> None:
    node = next(iter(driver_under_test.endpoints))
    foreign = Builder(namespace=namespace, driver=f"other-{namespace.rsplit('-', 1)[1]}.example.com")
    foreign_class = tracker.create(foreign.device_class())["metadata"]["name"]
    tracker.create(foreign.resource_slice(node, devices=1))
    claim = allocate(tracker, foreign, api_client, foreign_class, timeout=timeouts.pod_scheduled, node=node)
    answer = kubelet.prepare(driver_under_test.endpoints[node], [claim.ref]).claims[claim.ref.uid]
    assert answer.error, f"{driver_under_test.name} prepared a claim of {foreign.driver}: {answer}"


def test_concurrent_prepares_all_succeed(
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
) -> None:
    node = next(iter(driver_under_test.endpoints))
    claims = [
        allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled, node=node)
        for _ in range(CONCURRENT_CLAIMS)
    ]
    endpoint = driver_under_test.endpoints[node]
    with concurrent.futures.ThreadPoolExecutor(max_workers=CONCURRENT_CLAIMS) as pool:
        results = list(pool.map(lambda c: kubelet.prepare(endpoint, [c.ref]).claims[c.ref.uid], claims))
    failed = {c.ref.name: r.error for c, r in zip(claims, results, strict=True) if r.error or not r.devices}
    assert not failed, f"concurrent prepares failed: {failed}"
    devices = [d["deviceName"] for r in results for d in r.devices]
    assert len(devices) == len(set(devices)) == CONCURRENT_CLAIMS, f"devices handed out: {devices}"
