"""Kubelet-side misbehaviour any driver must survive: the harness controls the calls, the driver needs no help.

The kubelet retries after errors and timeouts, may unprepare claims that were never prepared or are already
deleted, and prepares again after an unprepare. Each check plays that kubelet against the driver under test.
"""

from __future__ import annotations

import uuid

import grpc
import pytest

from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.client import ClaimRef
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare, reported_devices
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations

pytestmark = pytest.mark.usefixtures("driver_sockets")

# Shorter than any real prepare (a socket round trip at least), so the call is cancelled by its deadline; the
# driver may or may not have started the work, which is what a kubelet retry after a timeout looks like.
CANCELLING_DEADLINE = 0.0005


def test_prepare_cancelled_by_its_deadline_succeeds_when_retried(
    allocated: AllocatedClaim, driver_under_test: DriverUnderTest, kubelet: KubeletRole, obligations: Obligations
) -> None:
    endpoint = driver_under_test.endpoints[allocated.node]
    cancelled = kubelet.prepare_outcome(endpoint, [allocated.ref], timeout=CANCELLING_DEADLINE)
    # A grpc-go driver may reset the stream as the deadline passes: the client reports that as DEADLINE_EXCEEDED too.
    if cancelled.error is None or cancelled.error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
        pytest.skip(
            f"not applicable: the call was not ended by its {CANCELLING_DEADLINE}s deadline ({cancelled.describe()})"
        )
    check_prepare_answer(
        obligations,
        allocated,
        driver_under_test.name,
        kubelet.prepare_outcome(endpoint, [allocated.ref]),
        "the retry after a prepare cancelled by its deadline",
    )


def test_unprepare_of_a_claim_never_prepared_succeeds(
    allocated: AllocatedClaim, driver_under_test: DriverUnderTest, kubelet: KubeletRole, obligations: Obligations
) -> None:
    check_unprepare(
        obligations,
        kubelet,
        driver_under_test.endpoints[allocated.node],
        allocated.ref,
        "protocol.unprepare-of-unprepared-claim-succeeds",
        "unprepare of a claim never prepared",
    )


def test_unprepare_of_an_unknown_claim_succeeds(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    namespace: str,
    obligations: Obligations,
) -> None:
    unknown = ClaimRef(namespace, str(uuid.uuid4()), "gone-before-we-looked")
    check_unprepare(
        obligations,
        kubelet,
        driver_under_test.endpoints[allocated.node],
        unknown,
        "protocol.unprepare-of-unprepared-claim-succeeds",
        "unprepare of a claim that never existed",
    )


def test_unprepare_of_a_deleted_claim_succeeds(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    obligations: Obligations,
) -> None:
    endpoint = driver_under_test.endpoints[allocated.node]
    check_prepare_answer(
        obligations, allocated, driver_under_test.name, kubelet.prepare_outcome(endpoint, [allocated.ref]), "prepare"
    )
    tracker.delete(allocated.pod)
    tracker.delete(allocated.claim)
    check_unprepare(
        obligations,
        kubelet,
        endpoint,
        allocated.ref,
        "protocol.unprepare-of-deleted-claim-succeeds",
        "unprepare after the claim was deleted",
    )


def test_prepare_after_unprepare_gets_the_allocated_devices_again(
    allocated: AllocatedClaim, driver_under_test: DriverUnderTest, kubelet: KubeletRole, obligations: Obligations
) -> None:
    endpoint = driver_under_test.endpoints[allocated.node]
    first = check_prepare_answer(
        obligations, allocated, driver_under_test.name, kubelet.prepare_outcome(endpoint, [allocated.ref]), "prepare"
    )
    check_unprepare(obligations, kubelet, endpoint, allocated.ref, "protocol.unprepare-succeeds", "unprepare")
    again = check_prepare_answer(
        obligations,
        allocated,
        driver_under_test.name,
        kubelet.prepare_outcome(endpoint, [allocated.ref]),
        "prepare after unprepare",
    )
    obligations.check(
        "protocol.prepare-after-unprepare-reports-same-devices",
        reported_devices(again) == reported_devices(first),
        f"first {reported_devices(first)}, again {reported_devices(again)}",
        f"claim {allocated.ref.name} on {allocated.node}",
    )
