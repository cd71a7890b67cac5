"""Obligations of the DRA plugin API that every prepare and unprepare answer must meet.

The obligations are in the registry (`dra_conformance/model/registry/protocol.yaml`), with their basis and the
upstream text they rest on; these helpers check them the same way for every call a protocol check makes.
"""

from __future__ import annotations

import re
from typing import Any

import grpc

from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.client import ClaimAnswer, ClaimRef
from dra_conformance.kubelet.role import CallOutcome, KubeletRole
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.model.findings import Obligations

# The DRA plugin services the kubelet accepts, by the version a call uses (pluginmanager accepts either).
DRA_SERVICES = {"v1": "v1.DRAPlugin", "v1beta1": "v1beta1.DRAPlugin"}
# A CDI device ID: <vendor>/<class>=<name> (the CDI specification's qualified device name).
CDI_DEVICE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*=[A-Za-z0-9][A-Za-z0-9_.:-]*$")


def reported_devices(answer: ClaimAnswer | None) -> list[tuple[str, str]]:
    """(pool, device) pairs a prepare answer reports, sorted."""
    return sorted((d["poolName"], d["deviceName"]) for d in (answer.devices if answer else []))


def allocated_devices(claim: AllocatedClaim, driver: str) -> list[tuple[str, str]]:
    """(pool, device) pairs the scheduler allocated to `driver` for the claim, sorted."""
    return sorted((r["pool"], r["device"]) for r in claim.results if r["driver"] == driver)


def check_prepare_answer(
    obligations: Obligations, claim: AllocatedClaim, driver: str, outcome: CallOutcome, call: str
) -> ClaimAnswer:
    """Obligations of every successful prepare answer for one valid claim; returns that answer."""
    where = f"{call}: claim {claim.ref.name} on {claim.node}"
    if outcome.error is not None:
        obligations.fail("protocol.valid-claim-prepares", outcome.describe(), where)
    keys = sorted(outcome.keys())
    obligations.check("protocol.prepare-answers-exactly-the-requested-claims", keys == [claim.ref.uid], keys, where)
    answer = outcome.answer(claim.ref)
    if answer is None:
        obligations.fail("protocol.prepare-answers-exactly-the-requested-claims", keys, where)
    obligations.check("protocol.valid-claim-prepares", not answer.error, answer.error, where)
    reported, allocated = set(reported_devices(answer)), set(allocated_devices(claim, driver))
    devices = f"reported {sorted(reported)}, allocated {sorted(allocated)}"
    obligations.check("protocol.reported-devices-are-allocated", reported <= allocated, devices, where)
    ids = [cdi for d in answer.devices for cdi in d["cdiDeviceIDs"]]
    obligations.check("protocol.cdi-device-ids-well-formed", all(CDI_DEVICE_ID.match(cdi) for cdi in ids), ids, where)
    obligations.check("protocol.every-allocated-device-reported", reported == allocated, devices, where)
    return answer


def check_unprepare(
    obligations: Obligations,
    kubelet: KubeletRole,
    endpoint: DriverEndpoint,
    claim: ClaimRef,
    obligation: str,
    call: str,
    **options: Any,
) -> None:
    """Unprepare `claim` on `endpoint`: the answer names exactly that claim, and `obligation` says it succeeds."""
    where = f"{call}: claim {claim.name} on {endpoint.node}"
    try:
        result = kubelet.unprepare(endpoint, [claim], **options)
    except grpc.RpcError as error:
        obligations.fail(obligation, f"whole-call error {error.code().name}: {error.details()}", where)
    keys = sorted(result.claims)
    obligations.check("protocol.unprepare-answers-exactly-the-requested-claims", keys == [claim.uid], keys, where)
    answer = result.claims.get(claim.uid)
    obligations.check(obligation, answer is not None and not answer.error, result.claims, where)
