"""After its unprepare answered, a claim's status is no longer the driver's to write.

A driver that refreshes status.devices on a timer of its own, or retries a write in the background, writes the claim
again after the kubelet unprepared it: its entries come back for a pod that is gone, or the API server refuses the
write once the claim is deallocated (issue 43's held-out class: 114 status writes against 74, 35 of them refused,
and no check noticed). The claim is watched for a window after the unprepare.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from dra_conformance.driver.profile import Capability
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.audit_log import status_writes
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

pytestmark = pytest.mark.usefixtures("driver_sockets")

# How long the claim is watched after the unprepare answered: a background refresh or a retried write of the prepare
# lands within seconds (the held-out bug wrote again 3 s after prepare); longer resync periods are not searched for,
# as each second here is a second of the default run on one worker.
QUIET_AFTER_UNPREPARE = 6.0


def test_no_status_write_by_the_driver_follows_its_unprepare(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    cluster: ClusterInfo,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    driver = driver_under_test.name
    endpoint = driver_under_test.endpoints[allocated.node]
    meta = allocated.claim["metadata"]
    where = f"claim {allocated.ref.name} on {allocated.node}"

    def mine() -> list[dict[str, Any]]:
        claim = tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"])
        return sorted((e for e in device_statuses(claim) if e["driver"] == driver), key=str)

    check_prepare_answer(obligations, allocated, driver, kubelet.prepare_outcome(endpoint, [allocated.ref]), "prepare")
    if driver_under_test.profile.declares(Capability.STATUS_DEVICES):
        # Unprepare only once the prepare's own writes landed: what follows is then the driver's doing after it.
        try:
            waits.until(
                mine, bool, timeout=timeouts.status_written, what=f"{driver}'s entries in {where}", describe=str
            )
        except WaitTimeout:
            pass  # protocol.declared-status-written judges a missing write; this check judges what follows
    check_unprepare(obligations, kubelet, endpoint, allocated.ref, "protocol.unprepare-succeeds", "unprepare")
    answered = time.time()
    at_answer = mine()  # what its unprepare left (none, for a driver that removes its entries at once)
    user = driver_under_test.profile.identity.service_account.username
    audit_log = cluster.audit_log

    def writes_since_answer() -> list[str]:
        """Entries of the driver written (added or changed) since the answer, and its writes the API server refused.

        Removing its entries after the answer is not counted: protocol.status-entries-removed-after-unprepare allows
        that to happen after the unprepare returns. A refused write (the claim deallocated meanwhile) shows only in
        the audit log.
        """
        refused = []
        if audit_log is not None:
            attempts = status_writes(audit_log, meta["namespace"], meta["name"], user, since=answered)
            refused = [f"status write by {user} refused: {a}" for a in attempts if not a.endswith(" 200")]
        written = [f"entry written: {entry}" for entry in mine() if entry not in at_answer]
        return [*refused, *written]

    try:
        seen = waits.until(
            writes_since_answer,
            bool,
            timeout=QUIET_AFTER_UNPREPARE,
            what=f"a status write by {driver} for {where} after its unprepare answered (none is expected)",
            describe=str,
        )
    except WaitTimeout:
        seen = []  # quiet for the whole window
    obligations.check(
        "protocol.no-status-write-after-unprepare",
        not seen,
        f"within {QUIET_AFTER_UNPREPARE:g} s of the unprepare's answer: {seen}"
        + ("" if audit_log is not None else " (the audit log is not readable: refused writes are not seen)"),
        where,
    )
