"""Claims of more than one request, and claims that mix two drivers, as the kubelet hands them to the driver.

A claim may ask for devices under several requests, and its requests may be served by different drivers. The kubelet
gives a container that references one request only the CDI devices answered under that request's name, and sends
each driver the claim as a whole, with the other drivers' allocation results in it. Both shapes were bugs that
certified (issue 43's held-out classes): every device answered under the first request's name, and status.devices
entries written for the other driver's devices too.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from dra_conformance.driver.profile import Capability
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.audit_log import status_writes
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.kubelet.obligations import allocated_devices, check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from .node_claims import claims_that_fit

pytestmark = pytest.mark.usefixtures("driver_sockets")

# The requests of the multi-request claim, one device each.
REQUESTS = ("first", "second")
# The API server's answers to a status write it refused for what the write carried (not a conflict, not a timeout):
# forbidden (the per-driver check on resourceclaims/driver) and invalid (an entry for a device not allocated).
REFUSED_FOR_CONTENT = ("403", "422")


def _request(name: str, device_class: str) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}}


def _claim_status(tracker: ResourceTracker, claim: AllocatedClaim) -> list[dict[str, Any]]:
    meta = claim.claim["metadata"]
    return device_statuses(tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))


def test_each_device_of_a_multi_request_claim_is_answered_under_its_own_request(
    held_nodes: None,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    """A claim of two requests, one device each: each device's request names are the requests it was allocated for."""
    claims_that_fit(driver_under_test, 1, f"a claim of {len(REQUESTS)}", devices=len(REQUESTS))
    spec = {"devices": {"requests": [_request(name, device_class) for name in REQUESTS]}}
    claim = allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled, spec=spec)
    driver = driver_under_test.name
    endpoint = driver_under_test.endpoints[claim.node]
    answer = check_prepare_answer(
        obligations, claim, driver, kubelet.prepare_outcome(endpoint, [claim.ref]), "prepare of a two-request claim"
    )
    for device in answer.devices:
        key = (device["poolName"], device["deviceName"], device.get("shareID") or "")
        allocated_for = sorted(
            str(result["request"]).split("/", 1)[0]  # a subrequest's device belongs to its request
            for result in claim.results
            if result["driver"] == driver and (result["pool"], result["device"], result.get("shareID") or "") == key
        )
        # No request names: the device is associated with every request of the claim (api.proto).
        named = sorted(set(device.get("requestNames") or REQUESTS))
        obligations.check(
            "protocol.answer-request-names-match-allocation",
            named == sorted(set(allocated_for)),
            f"{key[0]}/{key[1]} answered under requests {device.get('requestNames')}, allocated for {allocated_for} "
            f"(the claim's results: {[(r['request'], r['pool'], r['device']) for r in claim.results]})",
            f"claim {claim.ref.name} on {claim.node}",
        )
    check_unprepare(obligations, kubelet, endpoint, claim.ref, "protocol.unprepare-succeeds", "unprepare")


def test_a_claim_mixing_two_drivers_gets_status_entries_only_for_the_drivers_own_devices(
    held_nodes: None,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    namespace: str,
    timeouts: Timeouts,
    cluster: ClusterInfo,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    """One request served by the driver, one by another driver (a slice the check publishes); prepare by the first.

    Nothing runs for the other driver, so any entry of it in status.devices, and any status write for the claim the
    API server refused as forbidden or invalid (where its audit log is readable), is the driver under test's.
    """
    node, endpoint = next(iter(driver_under_test.endpoints.items()))
    driver = driver_under_test.name
    other = Builder(
        namespace=namespace, driver=f"other-{namespace.rsplit('-', 1)[1]}.example.com", hold=driver_under_test.hold
    )
    # Named by this check's builder: the other builder's counter would repeat the names of the driver's class.
    other_class = build.cluster_name("other-class")
    tracker.create({**other.device_class(), "metadata": {"name": other_class}})
    tracker.create({**other.resource_slice(node, devices=1), "metadata": {"name": build.cluster_name("other-slice")}})
    spec = {"devices": {"requests": [_request("mine", device_class), _request("theirs", other_class)]}}
    claim = allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled, node=node, spec=spec)
    outcome = kubelet.prepare_outcome(endpoint, [claim.ref])
    mine = {(pool, device) for pool, device in allocated_devices(claim, driver)}
    where = f"claim {claim.ref.name} on {node}, allocated from {driver} {sorted(mine)} and from {other.driver}"

    def foreign(entries: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return sorted(
            (e["driver"], e["pool"], e["device"])
            for e in entries
            if e["driver"] != driver or (e["pool"], e["device"]) not in mine
        )

    entries = _claim_status(tracker, claim)
    if outcome.prepared(claim.ref) and driver_under_test.profile.declares(Capability.STATUS_DEVICES):
        # The driver may write after it answered: judge once its own entries are there (or at the deadline).
        try:
            entries = waits.until(
                lambda: _claim_status(tracker, claim),
                lambda now: {(e["pool"], e["device"]) for e in now if e["driver"] == driver} >= mine,
                timeout=timeouts.status_written,
                what=f"status.devices of {claim.ref.name} listing {driver}'s devices {sorted(mine)}",
                describe=str,
            )
        except WaitTimeout:
            entries = _claim_status(tracker, claim)
    refused = []
    if cluster.audit_log is not None:
        user = driver_under_test.profile.identity.service_account.username
        attempts = status_writes(cluster.audit_log, claim.ref.namespace, claim.ref.name, user)
        refused = [attempt for attempt in attempts if attempt.rsplit(" ", 1)[-1] in REFUSED_FOR_CONTENT]
    obligations.check(
        "protocol.status-entries-only-for-own-devices",
        not foreign(entries) and not refused,
        f"entries not of {driver}'s devices: {foreign(entries)}; its status writes for the claim refused as "
        f"forbidden or invalid: {refused} (prepare: {outcome.describe()})",
        where,
    )
    check_prepare_answer(obligations, claim, driver, outcome, "prepare of a claim mixing two drivers")
    check_unprepare(obligations, kubelet, endpoint, claim.ref, "protocol.unprepare-succeeds", "unprepare")
