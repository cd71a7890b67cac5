"""Obligations of the DRA plugin API that every prepare answer must meet, with their sources.

Sources are cited as in the contract audit: file:line in the pinned upstream versions.
"""

from __future__ import annotations

import re

from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.client import ClaimAnswer
from dra_conformance.kubelet.role import CallOutcome
from dra_conformance.report.findings import Obligations

PROTO = "k8s.io/kubelet@v0.37.2 pkg/apis/dra/v1/api.proto"
REGISTRATION_PROTO = "k8s.io/kubelet@v0.37.2 pkg/apis/pluginregistration/v1/api.proto"
KUBELET = "k8s.io/kubernetes@v1.37.2 pkg/kubelet"
HELPER = "k8s.io/dynamic-resource-allocation@v0.37.2 kubeletplugin/draplugin.go"
API_TYPES = "k8s.io/api@v0.37.2 resource/v1/types.go"
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
    obligations.contract(
        outcome.error is None, f"{call}: a correctly allocated claim prepares", outcome.describe(), f"{KUBELET}/cm/dra"
    )
    obligations.contract(
        outcome.keys() == {claim.ref.uid},
        f"{call}: the response names exactly the requested claim UIDs",
        sorted(outcome.keys()),
        f"{PROTO}:43-50; {KUBELET}/cm/dra/manager.go:430-434,467-470",
    )
    answer = outcome.answer(claim.ref)
    assert answer is not None
    obligations.contract(not answer.error, f"{call}: no error for a valid claim", answer.error, f"{PROTO}:53-61")
    reported, allocated = set(reported_devices(answer)), set(allocated_devices(claim, driver))
    obligations.contract(
        reported <= allocated,
        f"{call}: every reported (pool, device) is one of this driver's allocation results",
        f"reported {sorted(reported)}, allocated {sorted(allocated)}",
        f"{PROTO}:69-73; {KUBELET}/cm/dra/manager.go:441-458",
    )
    ids = [cdi for d in answer.devices for cdi in d["cdiDeviceIDs"]]
    obligations.contract(
        all(CDI_DEVICE_ID.match(cdi) for cdi in ids),
        f"{call}: CDI device IDs, when present, are <vendor>/<class>=<name>",
        ids,
        f"{PROTO}:75-77; {HELPER}:275-278",
    )
    obligations.defensive(
        reported == allocated,
        f"{call}: every allocated device is reported",
        f"reported {sorted(reported)}, allocated {sorted(allocated)}",
        f"{PROTO}:53-58 (zero or more devices)",
    )
    return answer
