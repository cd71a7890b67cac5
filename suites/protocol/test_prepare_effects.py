"""What a prepare leaves behind: on the node (CDI specs) and in the claim (status.devices), once it is undone or failed.

The kubeletplugin helper's contract: "UnprepareResourceClaims must undo whatever work PrepareResourceClaims did",
CDI spec files written on the fly included. A status.devices entry's Ready condition says the device is configured
for use; a prepare that failed configured nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_conformance.driver.applicability import require_fault_switches
from dra_conformance.driver.profile import Capability
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.claims import device_condition, device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations

from .cdi_specs import cdi_dir_of

pytestmark = pytest.mark.usefixtures("driver_sockets")


def _specs_naming(cdi_dir: Path, claim_uid: str) -> list[str]:
    """CDI spec files in `cdi_dir` whose text names the claim's UID (unique per claim, as the helper advises)."""
    return [
        path.name
        for path in sorted(cdi_dir.iterdir())
        if path.is_file() and claim_uid in path.read_text(errors="replace")
    ]


def test_unprepare_removes_the_cdi_specs_prepare_wrote(
    allocated: AllocatedClaim, driver_under_test: DriverUnderTest, kubelet: KubeletRole, obligations: Obligations
) -> None:
    endpoint = driver_under_test.endpoints[allocated.node]
    cdi_dir = cdi_dir_of(endpoint)
    answer = check_prepare_answer(
        obligations, allocated, driver_under_test.name, kubelet.prepare_outcome(endpoint, [allocated.ref]), "prepare"
    )
    written = _specs_naming(cdi_dir, allocated.ref.uid) if cdi_dir.is_dir() else []
    if not written:
        pytest.skip(
            f"not applicable: no CDI spec in {cdi_dir} names claim {allocated.ref.uid} after prepare (CDI IDs "
            f"answered: {[cdi for d in answer.devices for cdi in d['cdiDeviceIDs']]}): nothing to clean up"
        )
    check_unprepare(obligations, kubelet, endpoint, allocated.ref, "protocol.unprepare-succeeds", "unprepare")
    left = _specs_naming(cdi_dir, allocated.ref.uid)
    obligations.check(
        "protocol.unprepare-removes-cdi-specs",
        not left,
        f"written by prepare {written}; left after unprepare {left}",
        f"claim {allocated.ref.name} on {allocated.node}, CDI dir {cdi_dir}",
    )


@pytest.mark.capability("statusDevices")
def test_a_failed_prepare_leaves_no_ready_status(
    allocated: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    obligations: Obligations,
) -> None:
    profile = driver_under_test.profile
    if not profile.declares(Capability.STATUS_DEVICES):
        pytest.skip(f"not applicable: {profile.source} does not declare statusDevices")
    require_fault_switches(profile, "making a valid claim's prepare fail")
    endpoint = driver_under_test.endpoints[allocated.node]
    control = FakeDriverControl(endpoint)
    undo = control.set_faults(
        [*control.faults(), {"mode": "prepare-error", "claim": allocated.ref.uid, "message": "device setup failed"}]
    )
    try:
        outcome = kubelet.prepare_outcome(endpoint, [allocated.ref])
    finally:
        undo()
    where = f"claim {allocated.ref.name} on {allocated.node}"
    obligations.check(
        "protocol.injected-prepare-fault-fails-prepare", not outcome.prepared(allocated.ref), outcome.describe(), where
    )
    meta = allocated.claim["metadata"]
    entries: list[dict[str, Any]] = [
        entry
        for entry in device_statuses(tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))
        if entry["driver"] == driver_under_test.name
    ]
    ready = [entry["device"] for entry in entries if (device_condition(entry, "Ready") or {}).get("status") == "True"]
    obligations.check(
        "protocol.failed-prepare-leaves-no-ready-status",
        not ready,
        {"prepare": outcome.describe(), "Ready=True for": ready, "entries": entries},
        where,
    )
