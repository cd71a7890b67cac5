"""Protocol obligations of any DRA driver, checked through its kubelet-plugin sockets (the csi-sanity of DRA).

Claims are allocated by the real scheduler; the test then plays the kubelet of the node they landed on. Each
obligation states its basis and its source (see `dra_conformance.report.findings`): *contract* obligations come
from the plugin API (k8s.io/kubelet v0.37.2) and the kubelet's behaviour (k8s.io/kubernetes v1.37.2) and fail the
check; *defensive* ones go beyond the contract and are advisories unless the strictness is `strict`.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.backends.base import ClusterInfo
from dra_conformance.driver.endpoint import DriverEndpoint, DriverUnderTest
from dra_conformance.driver.profile import Capability
from dra_conformance.kube import waits
from dra_conformance.kube.audit_log import status_writes
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_condition, device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.kubelet.client import ClaimRef, DriverClient
from dra_conformance.kubelet.obligations import (
    API_TYPES,
    DRA_SERVICES,
    HELPER,
    KUBELET,
    PROTO,
    REGISTRATION_PROTO,
    allocated_devices,
    check_prepare_answer,
    reported_devices,
)
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.report.findings import Obligations
from dra_conformance.timeouts import Timeouts

# Every check here talks to the driver's sockets: not applicable where this machine cannot reach them.
pytestmark = pytest.mark.usefixtures("driver_sockets")

# Claims prepared at once in the concurrency check: at most this many, and at most half of a node's devices, so
# that tests on the other xdist worker still find free devices.
CONCURRENT_CLAIMS = 4


def _current_status(tracker: ResourceTracker, claim: AllocatedClaim) -> list[dict[str, Any]]:
    meta = claim.claim["metadata"]
    return device_statuses(tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))


def _node_local_work(
    driver: DriverUnderTest, endpoint: DriverEndpoint, cluster: ClusterInfo, claim: ClaimRef
) -> list[str]:
    """What the driver did on its node for `claim`: CDI specs naming the claim's UID, its status writes for it."""
    work = []
    if endpoint.cdi_dir is not None and endpoint.cdi_dir.is_dir():
        work += [f"CDI spec {p.name}" for p in sorted(endpoint.cdi_dir.iterdir()) if claim.uid in _text(p)]
    if cluster.audit_log is not None:
        user = driver.profile.identity.service_account.username
        writes = status_writes(cluster.audit_log, claim.namespace, claim.name, user)
        work += [f"status write by {user}: {attempt}" for attempt in writes]
    return work


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def test_registration_names_the_driver_and_a_service_the_kubelet_accepts(
    driver_under_test: DriverUnderTest, driver_client: Callable[..., DriverClient], obligations: Obligations
) -> None:
    for node, endpoint in driver_under_test.endpoints.items():
        plugin = driver_client(endpoint)
        info = plugin.get_info()
        obligations.contract(
            info.type == "DRAPlugin",
            f"{node}: type is DRAPlugin",
            info.type,
            f"{KUBELET}/pluginmanager (opgen:103-109)",
        )
        obligations.contract(
            info.name == driver_under_test.name,
            f"{node}: the registered name is the DRA driver name",
            info.name,
            f"{KUBELET}/cm/dra/plugin/dra_plugin_manager.go:318-319",
        )
        versions = list(info.supported_versions)
        obligations.contract(
            any(service in versions for service in DRA_SERVICES.values()),
            f"{node}: offers v1.DRAPlugin or v1beta1.DRAPlugin",
            versions,
            f"{KUBELET}/cm/dra/plugin/dra_plugin.go:47-50",
        )
        obligations.defensive(
            DRA_SERVICES["v1"] in versions, f"{node}: offers v1.DRAPlugin (the stable service)", versions, PROTO
        )
        obligations.contract(
            plugin.notify_registration_status(registered=True) is not None,
            f"{node}: answers NotifyRegistrationStatus (else the kubelet deregisters it)",
            "no answer",
            f"{REGISTRATION_PROTO}:31-41",
        )


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_and_unprepare_are_idempotent(
    version: str,
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    driver_client: Callable[..., DriverClient],
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    endpoint = driver_under_test.endpoints[allocated.node]
    advertised = list(driver_client(endpoint).get_info().supported_versions)
    if DRA_SERVICES[version] not in advertised:
        pytest.skip(f"not applicable: the driver does not advertise {DRA_SERVICES[version]} (it offers {advertised})")
    first, again = (
        check_prepare_answer(
            obligations,
            allocated,
            driver_under_test.name,
            kubelet.prepare_outcome(endpoint, [allocated.ref], version=version),
            call,
        )
        for call in ("first prepare", "repeated prepare")
    )
    obligations.contract(
        reported_devices(again) == reported_devices(first),
        "a repeated prepare reports the same devices (prepare is idempotent)",
        f"first {reported_devices(first)}, again {reported_devices(again)}",
        f"{HELPER}:124-125",
    )
    obligations.defensive(again == first, "a repeated prepare answers identically", f"{again} vs {first}", HELPER)
    for attempt in ("first", "repeated"):
        answer = kubelet.unprepare(endpoint, [allocated.ref], version=version)
        obligations.contract(
            set(answer.claims) == {allocated.ref.uid} and not answer.claims[allocated.ref.uid].error,
            f"{attempt} unprepare succeeds and names exactly the requested claim (unprepare is idempotent)",
            answer.claims,
            f"{PROTO}:89-99; {HELPER}:162-165",
        )


@pytest.mark.capability("statusDevices")
def test_declared_status_devices_follow_prepare_and_unprepare(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    obligations: Obligations,
    timeouts: Timeouts,
) -> None:
    if not driver_under_test.profile.declares(Capability.STATUS_DEVICES):
        pytest.skip(f"not applicable: {driver_under_test.profile.source} does not declare statusDevices")
    obligations.defensive(
        _current_status(tracker, allocated) == [],
        "status.devices is empty before any prepare (unless binding conditions are in use)",
        _current_status(tracker, allocated),
        f"{API_TYPES}:479-482",
    )
    endpoint = driver_under_test.endpoints[allocated.node]
    check_prepare_answer(
        obligations, allocated, driver_under_test.name, kubelet.prepare_outcome(endpoint, [allocated.ref]), "prepare"
    )
    expected = sorted(
        (driver_under_test.name, pool, device) for pool, device in allocated_devices(allocated, driver_under_test.name)
    )

    def mine() -> list[dict[str, Any]]:
        return [e for e in _current_status(tracker, allocated) if e["driver"] == driver_under_test.name]

    # Declared, so not delivering it fails (fail closed); the field may be written after prepare returns.
    entries = waits.until(
        mine,
        lambda now: sorted((e["driver"], e["pool"], e["device"]) for e in now) == expected,
        timeout=timeouts.status_written,
        what=f"status.devices of {allocated.ref.name} listing {expected} (the profile declares statusDevices)",
        describe=str,
    )
    for entry in entries:
        ready = device_condition(entry, "Ready")
        obligations.defensive(
            ready is not None and ready["status"] == "True",
            f"the status of {entry['device']} has Ready=True once prepared",
            entry,
            f"{API_TYPES}:2590-2592 (should)",
        )
    kubelet.unprepare(endpoint, [allocated.ref])
    obligations.defensive(
        mine() == [], "this driver's status.devices entries are gone after unprepare", mine(), API_TYPES
    )


def test_unknown_claim_is_never_reported_prepared(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    namespace: str,
    obligations: Obligations,
) -> None:
    unknown = ClaimRef(namespace, str(uuid.uuid4()), "no-such-claim")
    endpoint = driver_under_test.endpoints[allocated.node]
    mixed = kubelet.prepare_outcome(endpoint, [allocated.ref, unknown])
    obligations.contract(
        not mixed.prepared(unknown),
        "a claim that does not exist is refused (whole-call error or per-claim error)",
        mixed.describe(),
        f"{PROTO}:25-28",
    )
    obligations.defensive(
        mixed.error is None,
        "the refusal is per claim, so the valid claim of the same call is not held up",
        mixed.describe(),
        f"{PROTO}:25-28 (can be reported per claim)",
    )
    check_prepare_answer(
        obligations,
        allocated,
        driver_under_test.name,
        kubelet.prepare_outcome(endpoint, [allocated.ref]),
        "the next call with only the valid claim",
    )


def test_claim_of_another_node_is_refused_without_node_local_work(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    cluster: ClusterInfo,
    obligations: Obligations,
) -> None:
    """Defensive: a kubelet never sends another node's claim, so refusing it is beyond the contract."""
    other = next((n for n in driver_under_test.endpoints if n != allocated.node), None)
    if other is None:
        pytest.skip("not applicable: the driver runs on one node only")
    endpoint = driver_under_test.endpoints[other]
    outcome = kubelet.prepare_outcome(endpoint, [allocated.ref])
    obligations.defensive(
        not outcome.prepared(allocated.ref),
        f"node {other} refuses a claim allocated to {allocated.node}",
        outcome.describe(),
        f"{KUBELET}/cm/dra/manager.go:296-316 (never sent)",
    )
    work = _node_local_work(driver_under_test, endpoint, cluster, allocated.ref)
    obligations.defensive(
        not work,
        f"node {other} does no node-local work (CDI spec, status write) for another node's claim",
        work,
        f"{API_TYPES} status.devices: only a claim's node may write it",
    )


def test_claim_of_another_driver_gets_no_device_and_no_node_local_work(
    cluster: ClusterInfo,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    namespace: str,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    node, endpoint = next(iter(driver_under_test.endpoints.items()))
    foreign = Builder(namespace=namespace, driver=f"other-{namespace.rsplit('-', 1)[1]}.example.com")
    foreign_class = tracker.create(foreign.device_class())["metadata"]["name"]
    tracker.create(foreign.resource_slice(node, devices=1))
    claim = allocate(tracker, foreign, api_client, foreign_class, timeout=timeouts.pod_scheduled, node=node)
    outcome = kubelet.prepare_outcome(endpoint, [claim.ref])
    obligations.contract(
        not reported_devices(outcome.answer(claim.ref)),
        f"{driver_under_test.name} reports no device for a claim allocated only to {foreign.driver}",
        outcome.describe(),
        f"{PROTO}:53-58; {KUBELET}/cm/dra/manager.go:329-341",
    )
    work = _node_local_work(driver_under_test, endpoint, cluster, claim.ref)
    obligations.defensive(
        not work, f"no node-local work (CDI spec, status write) for a claim of {foreign.driver}", work, PROTO
    )


def test_concurrent_prepares_all_succeed(
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    count = min(CONCURRENT_CLAIMS, driver_under_test.profile.devices.per_node // 2)
    if count < 2:
        pytest.skip(f"not applicable: {driver_under_test.profile.devices.per_node} device(s) per node leave no room")
    node = next(iter(driver_under_test.endpoints))
    claims = [
        allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled, node=node)
        for _ in range(count)
    ]
    endpoint = driver_under_test.endpoints[node]
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        outcomes = list(pool.map(lambda c: kubelet.prepare_outcome(endpoint, [c.ref]), claims))
    answers = [
        check_prepare_answer(
            obligations, claim, driver_under_test.name, outcome, f"concurrent prepare of {claim.ref.name}"
        )
        for claim, outcome in zip(claims, outcomes, strict=True)
    ]
    devices = [device for answer in answers for device in reported_devices(answer)]
    obligations.defensive(
        len(devices) == len(set(devices)),
        "concurrent claims get distinct devices (the driver's last line of defence)",
        devices,
        f"{HELPER}:127-132 (should)",
    )
