"""Calls for several claims at once, as the kubelet sends them: all claims of a pod for one driver in one call.

The kubelet batches a pod's claims per driver into one NodePrepareResources call, reads each claim's devices from
the answer under that claim's UID, and unprepares them again in one NodeUnprepareResources call
(k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/dra/manager.go:402-470, 726-757). A driver tested one claim per call
only can answer a batch under the wrong UIDs, or undo only part of it, and still pass.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import (
    CDI_DEVICE_ID,
    allocated_devices,
    check_prepare_answer,
    check_unprepare,
    reported_devices,
)
from dra_conformance.kubelet.role import CallOutcome, KubeletRole
from dra_conformance.model.findings import Obligations

from .node_claims import ClaimsOnOneNode

pytestmark = pytest.mark.usefixtures("driver_sockets")

# Claims in one call: a pod with a few claims; at most half of a node's devices, so that tests on the other xdist
# worker still find free devices.
BATCH_CLAIMS = 3


def _specs_naming(cdi_dir: Path | None, claim_uid: str) -> list[str]:
    """CDI spec files in `cdi_dir` whose text names the claim's UID (unique per claim, as the helper advises)."""
    if cdi_dir is None or not cdi_dir.is_dir():
        return []
    found = []
    for path in sorted(cdi_dir.iterdir()):
        try:
            if path.is_file() and claim_uid in path.read_text(errors="replace"):
                found.append(path.name)
        except FileNotFoundError:  # removed since the listing
            continue
    return found


def _check_batch_answer(
    obligations: Obligations, claims: list[AllocatedClaim], driver: str, outcome: CallOutcome, node: str
) -> None:
    """Each claim of one prepare call answered under its own UID, with its own devices."""
    where = f"prepare of {len(claims)} claims in one call on {node}"
    if outcome.error is not None:
        obligations.fail("protocol.valid-claim-prepares", outcome.describe(), where)
    keys, requested = sorted(outcome.keys()), sorted(c.ref.uid for c in claims)
    obligations.check(
        "protocol.prepare-answers-exactly-the-requested-claims",
        keys == requested,
        f"answered {keys}, requested {requested}",
        where,
    )
    owner = {device: c.ref.name for c in claims for device in allocated_devices(c, driver)}
    for claim in claims:
        at = f"{where}: claim {claim.ref.name} ({claim.ref.uid})"
        answer = outcome.answer(claim.ref)
        if answer is None:
            obligations.fail("protocol.prepare-answers-exactly-the-requested-claims", keys, at)
        obligations.check("protocol.valid-claim-prepares", not answer.error, answer.error, at)
        reported, allocated = set(reported_devices(answer)), set(allocated_devices(claim, driver))
        foreign = sorted(
            f"{pool}/{device} (of {owner[pool, device]})"
            for pool, device in reported - allocated
            if (pool, device) in owner
        )
        devices = f"reported {sorted(reported)}, allocated {sorted(allocated)}"
        obligations.check(
            "protocol.batch-answer-reports-its-own-claims-devices",
            not foreign,
            f"{devices}; allocated to other claims of the call: {foreign}",
            at,
        )
        obligations.check("protocol.reported-devices-are-allocated", reported <= allocated, devices, at)
        ids = [cdi for d in answer.devices for cdi in d["cdiDeviceIDs"]]
        obligations.check("protocol.cdi-device-ids-well-formed", all(CDI_DEVICE_ID.match(cdi) for cdi in ids), ids, at)
        obligations.check("protocol.every-allocated-device-reported", reported == allocated, devices, at)


def test_claims_prepared_and_unprepared_in_one_call_are_each_handled(
    tracker: ResourceTracker,
    claims_on_one_node: Callable[..., ClaimsOnOneNode],
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    batch = claims_on_one_node(BATCH_CLAIMS)
    node, endpoint, claims = batch.node, batch.endpoint, batch.claims
    count = len(claims)
    refs = [claim.ref for claim in claims]
    driver = driver_under_test.name
    _check_batch_answer(obligations, claims, driver, kubelet.prepare_outcome(endpoint, refs), node)
    written = {claim.ref.uid: _specs_naming(endpoint.cdi_dir, claim.ref.uid) for claim in claims}

    where = f"unprepare of {count} claims in one call on {node}"
    try:
        result = kubelet.unprepare(endpoint, refs)
    except grpc.RpcError as error:
        obligations.fail(
            "protocol.unprepare-succeeds", f"whole-call error {error.code().name}: {error.details()}", where
        )
    keys, requested = sorted(result.claims), sorted(ref.uid for ref in refs)
    obligations.check(
        "protocol.unprepare-answers-exactly-the-requested-claims",
        keys == requested,
        f"answered {keys}, requested {requested}",
        where,
    )
    for ref in refs:
        answer = result.claims.get(ref.uid)
        at = f"{where}: claim {ref.name}"
        obligations.check("protocol.unprepare-succeeds", answer is not None and not answer.error, result.claims, at)
    # Node-local evidence that every claim was undone, not only reported so: its CDI specs are gone.
    left = {
        ref.name: _specs_naming(endpoint.cdi_dir, ref.uid) for ref in refs if _specs_naming(endpoint.cdi_dir, ref.uid)
    }
    obligations.check(
        "protocol.batch-unprepare-undoes-every-claim",
        not left,
        f"CDI specs written by the prepare {written}; left after the unprepare {left}",
        f"{where}, CDI dir {endpoint.cdi_dir}",
    )
    for claim in claims:
        meta = claim.claim["metadata"]
        entries = device_statuses(tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))
        stale = [entry for entry in entries if entry["driver"] == driver]
        obligations.check(
            "protocol.status-entries-removed-after-unprepare", not stale, stale, f"{where}: claim {claim.ref.name}"
        )

    # The first claim alone again: a claim of a batch is prepared and unprepared on its own like any other.
    first = claims[0]
    again = check_prepare_answer(
        obligations,
        first,
        driver,
        kubelet.prepare_outcome(endpoint, [first.ref]),
        "prepare of one claim of the batch after its unprepare",
    )
    obligations.check(
        "protocol.prepare-after-unprepare-reports-same-devices",
        reported_devices(again) == allocated_devices(first, driver),
        f"reported {reported_devices(again)}, allocated {allocated_devices(first, driver)}",
        f"claim {first.ref.name} on {node}",
    )
    check_unprepare(obligations, kubelet, endpoint, first.ref, "protocol.unprepare-succeeds", "its unprepare")
