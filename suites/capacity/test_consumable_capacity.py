"""Consumable capacity: claims share one device within its capacity, each share is prepared and unprepared alone.

Every check works on one shareable device (`shared_device`, see conftest.py): claims request the capacity the plan
gives, so that `plan.fits` of them fit on the device and one more does not. What the scheduler allocates (shares,
their IDs and consumed capacity, the claim beyond the capacity left Unschedulable) is the cluster's doing with what
the driver published; what a prepare answers for each share, where it writes status and what an unprepare leaves is
the driver's. The obligations are in `dra_conformance/model/registry/capacity.yaml`.
"""

from __future__ import annotations

from typing import Any

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.shared_capacity import same_amount
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.pods import describe_pod, scheduled_condition
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from ..protocol.cdi_specs import read_specs
from .conftest import SharedDevice


class Shares:
    """Claims and pods on one shared device, each claim requesting the plan's capacity."""

    def __init__(self, target: SharedDevice, tracker: ResourceTracker, api_client: client.ApiClient) -> None:
        """Create the device class that selects the target device alone."""
        self.target, self.tracker = target, tracker
        self.core = client.CoreV1Api(api_client)
        self.device_class = str(
            tracker.create(target.build.device_class(selectors=(target.selector,)))["metadata"]["name"]
        )

    def create(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """A claim for one share of the device and a pod using it, pinned to the device's node."""
        build = self.target.build
        spec = {
            "devices": {
                "requests": [
                    {
                        "name": "share",
                        "exactly": {
                            "deviceClassName": self.device_class,
                            "count": 1,
                            "capacity": {"requests": self.target.plan.claim_capacity()},
                        },
                    }
                ]
            }
        }
        claim = self.tracker.create(build.claim_from_spec(spec))
        pod = self.tracker.create(
            build.held(
                build.pod(claim=claim["metadata"]["name"], node=self.target.node, tolerations=self.target.tolerations)
            )
        )
        return claim, pod

    def bound(self, pod: dict[str, Any], timeout: float) -> AllocatedClaim:
        """The pod's claim once the pod is bound (allocated by the scheduler)."""
        name = pod["metadata"]["name"]
        waits.until(
            lambda: self.core.read_namespaced_pod(name, self.target.build.namespace),
            lambda p: bool(p.spec.node_name),
            timeout=timeout,
            what=f"pod {name} (a share of {self.target.device}) bound",
            describe=describe_pod,
        )
        return AllocatedClaim(self.claim_of(pod), pod, self.target.node)

    def claim_of(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The current state of the pod's claim."""
        name = pod["spec"]["resourceClaims"][0]["resourceClaimName"]
        return self.tracker.get(RESOURCE_API, "ResourceClaim", name, self.target.build.namespace)

    def results(self, claim: AllocatedClaim) -> list[dict[str, Any]]:
        """The claim's allocation results on the target device."""
        target = self.target
        return [
            r
            for r in claim.results
            if (r["driver"], r["pool"], r["device"]) == (target.driver, target.pool, target.device)
        ]


def _shares(allocated: list[AllocatedClaim], shares: Shares) -> dict[str, str]:
    """Claim name -> the share ID its allocation of the device carries ("" when none)."""
    return {c.ref.name: str(r.get("shareID") or "") for c in allocated for r in shares.results(c)}


@pytest.mark.capability("consumableCapacity")
def test_claims_share_a_device_within_its_capacity_and_the_one_beyond_it_stays_unschedulable(
    shared_device: SharedDevice,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    target, plan = shared_device, shared_device.plan
    shares = Shares(target, tracker, api_client)
    where = f"device {target.pool}/{target.device} of {target.driver} on {target.node}, {plan.fits} shares"
    pods = [shares.create()[1] for _ in range(plan.fits)]
    allocated = [shares.bound(pod, timeouts.pod_scheduled) for pod in pods]
    on_device = {c.ref.name: [r["device"] for r in c.results] for c in allocated}
    obligations.check(
        "capacity.shares-within-capacity-allocated-one-device",
        all(devices == [target.device] for devices in on_device.values()),
        f"allocated devices per claim: {on_device}",
        where,
    )
    share_ids = _shares(allocated, shares)
    obligations.check(
        "capacity.allocation-carries-distinct-share-ids",
        all(share_ids.values()) and len(set(share_ids.values())) == len(allocated),
        f"share IDs per claim: {share_ids}",
        where,
    )
    for claim in allocated:
        for result in shares.results(claim):
            reported = result.get("consumedCapacity") or {}
            obligations.check(
                "capacity.allocation-carries-consumed-capacity",
                set(reported) == set(plan.consumed)
                and all(same_amount(reported[name], amount) for name, amount in plan.consumed.items()),
                f"consumedCapacity {reported}; the device's request policies give {plan.consumed}",
                f"{where}, claim {claim.ref.name}",
            )
    _, extra = shares.create()
    name = extra["metadata"]["name"]
    pod = waits.until(
        lambda: shares.core.read_namespaced_pod(name, target.build.namespace),
        lambda p: (
            p.spec.node_name is not None
            or (scheduled_condition(p) is not None and scheduled_condition(p).reason == "Unschedulable")
        ),
        timeout=timeouts.pod_scheduled,
        what=f"scheduler's decision on pod {name}, one share beyond the capacity of {target.device}",
        describe=describe_pod,
    )
    condition = scheduled_condition(pod)
    message = condition.message if condition is not None else ""
    allure.attach(
        describe_pod(pod), "scheduler's decision on the share beyond the capacity", allure.attachment_type.TEXT
    )
    obligations.check(
        "capacity.share-beyond-capacity-unschedulable",
        pod.spec.node_name is None and "cannot allocate all claims" in (message or ""),
        describe_pod(pod),
        where,
    )
    left = shares.claim_of(extra).get("status", {}).get("allocation")
    obligations.check("capacity.share-beyond-capacity-unallocated", left is None, f"allocation {left}", where)


@pytest.mark.capability("consumableCapacity")
def test_each_share_is_prepared_with_its_share_id_and_unprepared_alone(
    shared_device: SharedDevice,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    kubelet: KubeletRole,
    driver_profile: DriverProfile,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    target = shared_device
    endpoint = target.endpoint
    if endpoint is None:
        pytest.skip(f"not applicable: the kubelet-plugin socket of {target.driver} on {target.node} is not reachable")
    shares = Shares(target, tracker, api_client)
    first, second = (shares.bound(shares.create()[1], timeouts.pod_scheduled) for _ in range(2))
    share_ids = _shares([first, second], shares)
    answers = {
        claim.ref.name: check_prepare_answer(
            obligations, claim, target.driver, kubelet.prepare_outcome(endpoint, [claim.ref]), "prepare"
        )
        for claim in (first, second)
    }
    where = f"shares {share_ids} of device {target.pool}/{target.device} on {target.node}"
    if driver_profile.declares(Capability.STATUS_DEVICES):
        for claim in (first, second):
            keyed = _status_keys(shares, claim, timeouts.status_written)
            allocated = {(r["device"], str(r.get("shareID") or "")) for r in shares.results(claim)}
            obligations.check(
                "capacity.status-entries-keyed-by-share-id",
                keyed == allocated,
                f"status.devices entries of the device as (device, shareID): {sorted(keyed)}; allocated {allocated}",
                f"{where}, claim {claim.ref.name}",
            )
    ids = {name: [cdi for d in answer.devices for cdi in d["cdiDeviceIDs"]] for name, answer in answers.items()}
    cdi_dir = endpoint.cdi_dir
    before = read_specs(cdi_dir) if cdi_dir is not None else {}
    check_unprepare(obligations, kubelet, endpoint, first.ref, "protocol.unprepare-succeeds", "unprepare of one share")
    if cdi_dir is not None:
        after = read_specs(cdi_dir)
        kept = {
            cdi: (cdi in after and after[cdi].edits == before.get(cdi, after[cdi]).edits)
            for cdi in ids[second.ref.name]
        }
        obligations.check(
            "capacity.unprepare-of-one-share-keeps-the-others",
            all(kept.values()),
            f"CDI devices of {second.ref.name} still defined as prepared: {kept}; "
            f"{first.ref.name}'s were {ids[first.ref.name]}",
            f"{where}, CDI dir {cdi_dir}",
        )
    again = kubelet.prepare_outcome(endpoint, [second.ref])
    repeated = again.answer(second.ref)
    obligations.check(
        "capacity.unprepare-of-one-share-keeps-the-others",
        repeated is not None and not repeated.error and repeated.devices == answers[second.ref.name].devices,
        f"prepare of {second.ref.name} again after {first.ref.name}'s unprepare: {again.describe()}; "
        f"first answered {answers[second.ref.name].devices}",
        where,
    )
    for claim in (first, second):
        answered = {
            (d["deviceName"], str(d.get("shareID") or ""))
            for d in answers[claim.ref.name].devices
            if d["deviceName"] == target.device
        }
        obligations.check(
            "capacity.prepare-answers-share-id",
            answered == {(target.device, share_ids[claim.ref.name])},
            f"answered (device, shareID): {sorted(answered)}; allocated share {share_ids[claim.ref.name]}",
            f"{where}, claim {claim.ref.name}",
        )
    common = set(ids[first.ref.name]) & set(ids[second.ref.name])
    obligations.check(
        "capacity.shares-get-distinct-cdi-devices",
        not common,
        f"CDI device IDs answered for both shares: {sorted(common)}; per claim: {ids}",
        where,
    )
    check_unprepare(obligations, kubelet, endpoint, second.ref, "protocol.unprepare-succeeds", "unprepare")


def _status_keys(shares: Shares, claim: AllocatedClaim, timeout: float) -> set[tuple[str, str]]:
    """(device, shareID) of the driver's status.devices entries for the target device, once there are any."""
    target = shares.target

    def entries() -> list[dict[str, Any]]:
        status = shares.claim_of(claim.pod).get("status") or {}
        return [
            e
            for e in status.get("devices") or []
            if (e["driver"], e["pool"], e["device"]) == (target.driver, target.pool, target.device)
        ]

    try:
        written = waits.until(
            entries, bool, timeout=timeout, what=f"status.devices entry of {target.device} in claim {claim.ref.name}"
        )
    except WaitTimeout:
        return set()  # none written: the check names what was allocated and that no entry came
    return {(e["device"], str(e.get("shareID") or "")) for e in written}
