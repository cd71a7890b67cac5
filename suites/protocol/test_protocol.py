"""Protocol obligations of any DRA driver, checked through its kubelet-plugin sockets (the csi-sanity of DRA).

Claims are allocated by the real scheduler; the test then plays the kubelet of the node they landed on. Every
statement is an obligation of `dra_conformance/model/registry/protocol.yaml`, with its basis (contract, defensive
or harness) and the upstream text it rests on (k8s.io/kubelet v0.37.2, k8s.io/kubernetes v1.37.2).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from dra_conformance.driver.lease import NodeLeases
from dra_conformance.driver.profile import Capability
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.audit_log import status_writes
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_condition, device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.kubelet.client import ClaimRef, DriverClient
from dra_conformance.kubelet.obligations import (
    DRA_SERVICES,
    allocated_devices,
    check_prepare_answer,
    check_unprepare,
    reported_devices,
)
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from .node_claims import ClaimsOnOneNode

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
        where = f"node {node}"
        plugin = driver_client(endpoint)
        info = plugin.get_info()
        obligations.check("protocol.registration-type-is-draplugin", info.type == "DRAPlugin", info.type, where)
        obligations.check(
            "protocol.registration-name-is-driver-name", info.name == driver_under_test.name, info.name, where
        )
        versions = list(info.supported_versions)
        obligations.check(
            "protocol.registration-offers-a-dra-service-the-kubelet-accepts",
            any(service in versions for service in DRA_SERVICES.values()),
            versions,
            where,
        )
        obligations.check("protocol.registration-offers-v1", DRA_SERVICES["v1"] in versions, versions, where)
        for version, service in DRA_SERVICES.items():
            if service in versions:
                problem = plugin.dra_service_problem(version)
                obligations.check("protocol.endpoint-serves-advertised-dra-service", problem is None, problem, where)
        try:
            answered, observed = plugin.notify_registration_status(registered=True) is not None, "no answer"
        except grpc.RpcError as error:
            answered, observed = False, f"{error.code().name}: {error.details()}"
        obligations.check("protocol.registration-status-answered", answered, observed, where)


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
            f"{call} ({version})",
        )
        for call in ("first prepare", "repeated prepare")
    )
    where = f"claim {allocated.ref.name} on {allocated.node} ({version})"
    obligations.check(
        "protocol.repeated-prepare-reports-same-devices",
        reported_devices(again) == reported_devices(first),
        f"first {reported_devices(first)}, again {reported_devices(again)}",
        where,
    )
    obligations.check("protocol.repeated-prepare-answers-identically", again == first, f"{again} vs {first}", where)
    check_unprepare(
        obligations, kubelet, endpoint, allocated.ref, "protocol.unprepare-succeeds", "first unprepare", version=version
    )
    check_unprepare(
        obligations,
        kubelet,
        endpoint,
        allocated.ref,
        "protocol.unprepare-is-idempotent",
        "repeated unprepare",
        version=version,
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
    profile = driver_under_test.profile
    if not profile.declares(Capability.STATUS_DEVICES):
        pytest.skip(f"not applicable: {profile.source} does not declare statusDevices")
    where = f"claim {allocated.ref.name} on {allocated.node}"
    if not profile.declares(Capability.BINDING_CONDITIONS):
        # Binding conditions are reported in status.devices before the pod binds, so before any prepare.
        before = _current_status(tracker, allocated)
        obligations.check("protocol.status-empty-before-prepare", before == [], before, where)
    endpoint = driver_under_test.endpoints[allocated.node]
    check_prepare_answer(
        obligations, allocated, driver_under_test.name, kubelet.prepare_outcome(endpoint, [allocated.ref]), "prepare"
    )
    expected = sorted(
        (driver_under_test.name, pool, device) for pool, device in allocated_devices(allocated, driver_under_test.name)
    )

    def mine() -> list[dict[str, Any]]:
        return [e for e in _current_status(tracker, allocated) if e["driver"] == driver_under_test.name]

    def listed(entries: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return sorted((e["driver"], e["pool"], e["device"]) for e in entries)

    # The field may be written after prepare returns (by the driver or another component): judge it at the deadline.
    try:
        entries = waits.until(
            mine,
            lambda now: listed(now) == expected,
            timeout=timeouts.status_written,
            what=f"status.devices of {allocated.ref.name} listing {expected}",
            describe=str,
        )
    except WaitTimeout:
        entries = mine()
    obligations.check("protocol.declared-status-written", bool(entries), entries, where)
    obligations.check(
        "protocol.status-entry-per-allocated-device",
        listed(entries) == expected,
        f"entries {listed(entries)}, allocated {expected}",
        where,
    )
    for entry in entries:
        ready = device_condition(entry, "Ready")
        obligations.check(
            "protocol.status-ready-condition-true",
            ready is not None and ready["status"] == "True",
            entry.get("conditions"),
            f"{where} device {entry['device']}",
        )
    check_unprepare(obligations, kubelet, endpoint, allocated.ref, "protocol.unprepare-succeeds", "unprepare")
    try:
        left = waits.until(
            mine, lambda now: not now, timeout=timeouts.status_written, what="status.devices emptied", describe=str
        )
    except WaitTimeout:
        left = mine()
    obligations.check("protocol.status-entries-removed-after-unprepare", not left, left, where)


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
    where = f"claim {unknown.name} ({unknown.uid}) with {allocated.ref.name} on {allocated.node}"
    obligations.check("protocol.unknown-claim-not-prepared", not mixed.prepared(unknown), mixed.describe(), where)
    obligations.check("protocol.refusal-is-per-claim", mixed.error is None, mixed.describe(), where)
    check_prepare_answer(
        obligations,
        allocated,
        driver_under_test.name,
        kubelet.prepare_outcome(endpoint, [allocated.ref]),
        "the next call with only the valid claim",
    )


@pytest.mark.provokes("a prepare of a claim allocated to another node: a status write for it is refused")
def test_claim_of_another_node_is_refused_without_node_local_work(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    cluster: ClusterInfo,
    obligations: Obligations,
    node_leases: Path,
    timeouts: Timeouts,
    request: pytest.FixtureRequest,
) -> None:
    with contextlib.ExitStack() as held:
        other = next((n for n in driver_under_test.endpoints if n != allocated.node), None)
        endpoint = driver_under_test.endpoints.get(other) if other is not None else None
        set_aside = cluster.disruption_real_node(driver_under_test.name)
        if other is None and set_aside is not None:
            # The real node set aside for the checks that stop the driver: leased as they lease it, so its driver
            # runs, untouched, while this check asks it.
            leases = NodeLeases(node_leases, "real", (set_aside,))
            other = held.enter_context(leases.lease(timeout=timeouts.node_lease, holder=request.node.nodeid))
            endpoint = next(
                (e for e in cluster.drivers if e.node == other and e.driver == driver_under_test.name), None
            )
        if other is None or endpoint is None:
            pytest.skip("not applicable: the driver runs on one node only")
        outcome = kubelet.prepare_outcome(endpoint, [allocated.ref])
        work = _node_local_work(driver_under_test, endpoint, cluster, allocated.ref)
    where = f"node {other}, claim {allocated.ref.name} allocated on {allocated.node}"
    obligations.check(
        "protocol.foreign-node-claim-refused", not outcome.prepared(allocated.ref), outcome.describe(), where
    )
    obligations.check("protocol.foreign-node-claim-no-node-local-work", not work, work, where)


@pytest.mark.provokes("a prepare of a claim of another driver: a status write for it is refused")
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
    foreign = Builder(
        namespace=namespace, driver=f"other-{namespace.rsplit('-', 1)[1]}.example.com", hold=driver_under_test.hold
    )
    foreign_class = tracker.create(foreign.device_class())["metadata"]["name"]
    tracker.create(foreign.resource_slice(node, devices=1))
    claim = allocate(tracker, foreign, api_client, foreign_class, timeout=timeouts.pod_scheduled, node=node)
    outcome = kubelet.prepare_outcome(endpoint, [claim.ref])
    where = f"node {node}, claim {claim.ref.name} allocated only to {foreign.driver}"
    obligations.check(
        "protocol.foreign-driver-claim-reports-no-device",
        not reported_devices(outcome.answer(claim.ref)),
        outcome.describe(),
        where,
    )
    work = _node_local_work(driver_under_test, endpoint, cluster, claim.ref)
    obligations.check("protocol.foreign-driver-claim-no-node-local-work", not work, work, where)


def test_concurrent_prepares_all_succeed(
    claims_on_one_node: Callable[..., ClaimsOnOneNode],
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    batch = claims_on_one_node(CONCURRENT_CLAIMS)
    endpoint, claims = batch.endpoint, batch.claims
    count = len(claims)
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        outcomes = list(pool.map(lambda c: kubelet.prepare_outcome(endpoint, [c.ref]), claims))
    answers = [
        check_prepare_answer(obligations, claim, driver_under_test.name, outcome, "concurrent prepare")
        for claim, outcome in zip(claims, outcomes, strict=True)
    ]
    devices = [device for answer in answers for device in reported_devices(answer)]
    obligations.check(
        "protocol.concurrent-claims-get-distinct-devices",
        len(devices) == len(set(devices)),
        devices,
        f"{count} claims on {batch.node}",
    )
