"""Partitionable devices: counter sets, the partitions that consume them, what the scheduler and prepare do with them.

A driver that declares partitionableDevices publishes in a pool counter sets (`spec.sharedCounters`, in slices of
their own) and devices that consume from them (`spec.devices[].consumesCounters`). Every check reads the pool on one
node that only it allocates from (`partition_target`): every reference resolves and no device consumes more than its
set holds; the scheduler keeps co-allocated partitions within the counters, leaves a claim that would exceed them
unschedulable and allocates it once a partition is freed; prepare answers exactly the allocated partitions, and
status.devices (where declared) names each of them. The obligations are in
`dra_conformance/model/registry/partitions.yaml`.

A claim cannot name a device, so the claims ask for a number of the driver's devices on the node: the largest
number that fits the counters together is computed from the pool, which lets the same checks run on any driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.counters import CounterPool, SearchTooLarge, node_counter_pools
from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Manifest
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.pods import describe_pod, scheduled_condition, scheduling_state
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from .target import PartitionTarget

# The scheduler's reason when the node's devices cannot satisfy a pod's claims (k8s.io/kubernetes v1.37.2
# pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go:1095).
CANNOT_ALLOCATE = "cannot allocate all claims"
# Most devices one claim may be allocated: AllocationResultsMaxSize, k8s.io/api v0.37.2 resource/v1/types.go:2205.
MAX_DEVICES_PER_CLAIM = 32
RECORD_KIND = "scheduler-outcome"

Device = tuple[str, str]  # (pool, device)


def _pools(target: PartitionTarget, api_client: client.ApiClient, obligations: Obligations) -> dict[str, CounterPool]:
    """Every pool of the driver on the target node; those with counters or partitions checked to be there and complete.

    The claims select any device of the driver on the node, so what fits together is counted over every pool.
    """
    pools = node_counter_pools(api_client, target.driver, target.node)
    partitioned = [pool for pool in pools.values() if pool.counter_sets or pool.partitioned]
    where = f"driver {target.driver} on {target.node}"
    obligations.check(
        "partitions.declared-partitions-published",
        any(pool.counter_sets and pool.partitioned for pool in partitioned),
        [pool.describe() for pool in pools.values()] or "no pool",
        where,
    )
    for pool in partitioned:
        obligations.check("partitions.counter-slices-counted-in-the-pool", pool.complete, pool.describe(), where)
    return pools


def _check_references(obligations: Obligations, pools: dict[str, CounterPool]) -> None:
    """Every reference resolves: the scheduler allocates nothing from a pool where one does not."""
    for pool in pools.values():
        unresolved = pool.unresolved()
        obligations.check("partitions.counter-references-resolve", not unresolved, unresolved, f"pool {pool.name}")


def _most_together(target: PartitionTarget, pools: dict[str, CounterPool]) -> int:
    """How many of the node's devices the scheduler can allocate at once; not applicable where that is unknowable."""
    try:
        most = sum(len(pool.largest_co_allocation()) for pool in pools.values())
    except SearchTooLarge as error:
        pytest.skip(f"not applicable: the largest co-allocation of {target.driver} on {target.node}: {error}")
    if most > MAX_DEVICES_PER_CLAIM:
        pytest.skip(
            f"not applicable: {most} devices of {target.driver} on {target.node} fit together, more than one claim "
            f"may be allocated ({MAX_DEVICES_PER_CLAIM})"
        )
    return most


def _allocated(claim: Manifest, driver: str) -> dict[Device, str]:
    """The claim's devices of `driver` as allocated now, with the request each was allocated for."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return {(r["pool"], r["device"]): r["request"] for r in results if r["driver"] == driver}


def _check_within_counters(
    obligations: Obligations, pools: dict[str, CounterPool], devices: Iterable[Device], where: str
) -> None:
    """`devices`, allocated at the same time, consume no more of any counter than its set holds."""
    listed = sorted(devices)
    for name, pool in pools.items():
        overdrawn = pool.overdrawn(device for device_pool, device in listed if device_pool == name)
        obligations.check(
            "partitions.co-allocated-within-counters", not overdrawn, f"{overdrawn} by allocated {listed}", where
        )


def _allocate(
    target: PartitionTarget, tracker: ResourceTracker, api_client: client.ApiClient, device_class: str, **options: Any
) -> AllocatedClaim:
    return allocate(
        tracker, target.build, api_client, device_class, node=target.node, tolerations=target.tolerations, **options
    )


@pytest.mark.capability("partitionableDevices")
def test_every_counter_consumption_resolves_within_its_pool_and_fits_its_counter_set(
    partition_target: Callable[..., PartitionTarget], api_client: client.ApiClient, obligations: Obligations
) -> None:
    target = partition_target()
    for pool in _pools(target, api_client, obligations).values():
        where = f"pool {pool.name} of {target.driver} on {target.node}"
        obligations.check(
            "partitions.counter-set-names-unique-in-pool",
            not pool.duplicate_sets,
            f"listed more than once: {list(pool.duplicate_sets)}",
            where,
        )
        unresolved = pool.unresolved()
        obligations.check("partitions.counter-references-resolve", not unresolved, unresolved, where)
        beyond = pool.devices_beyond_their_sets()
        obligations.check("partitions.device-consumption-within-its-counter-set", not beyond, beyond, where)


def _failed_scheduling(core: client.CoreV1Api, namespace: str, pod: str, timeout: float) -> list[str]:
    """Messages of the pod's FailedScheduling events, once there is one (none after `timeout`)."""

    def messages() -> list[str]:
        listed = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}")
        return [event.message for event in listed.items if event.reason == "FailedScheduling"]

    try:
        return waits.until(messages, bool, timeout=timeout, what=f"FailedScheduling event of pod {pod}", describe=str)
    except WaitTimeout:
        return []


def _unschedulable(pod: client.V1Pod) -> bool:
    condition = scheduled_condition(pod)
    return condition is not None and condition.status == "False" and condition.reason == "Unschedulable"


@pytest.mark.capability("partitionableDevices")
def test_scheduler_keeps_partitions_within_their_counters_and_allocates_a_waiting_claim_once_one_is_freed(
    request: pytest.FixtureRequest,
    partition_target: Callable[..., PartitionTarget],
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    """A holder takes one device; a claim for as many devices as ever fit together then cannot fit until it goes.

    Whatever device the holder gets, the waiting claim needs every device of a largest co-allocation: with the
    holder's counters taken that many no longer fit (else a larger co-allocation would exist), without them they do.
    """
    target = partition_target()
    pools = _pools(target, api_client, obligations)
    _check_references(obligations, pools)
    most = _most_together(target, pools)
    offered = sum(len(set(pool.consumers) - pool.tainted) for pool in pools.values())
    if most >= offered:
        pytest.skip(
            f"not applicable: all {offered} devices of {target.driver} on {target.node} fit their counters together; "
            "no claim can exceed them"
        )
    where = f"{target.driver} on {target.node}"
    build, core = target.build, client.CoreV1Api(api_client)
    device_class = str(tracker.create(build.device_class())["metadata"]["name"])
    try:
        holder = _allocate(target, tracker, api_client, device_class, timeout=timeouts.pod_scheduled)
    except WaitTimeout as error:
        obligations.fail("partitions.fitting-claim-allocated", str(error), where)
    held = _allocated(holder.claim, target.driver)
    _check_within_counters(obligations, pools, held, f"holder claim {holder.ref.name} on {where}")

    claim = tracker.create(build.claim(device_class, count=most))
    name = claim["metadata"]["name"]
    manifest = build.held(build.pod(claim=name, node=target.node, tolerations=target.tolerations))
    pod = tracker.create(manifest)["metadata"]["name"]
    waiting = f"pod {pod} (claim {name} for {most} devices) while {sorted(held)} is held"
    try:
        decided = waits.until(
            lambda: core.read_namespaced_pod(pod, build.namespace),
            lambda p: bool(p.spec.node_name) or _unschedulable(p),
            timeout=timeouts.pod_scheduled,
            what=f"scheduling decision on {waiting}",
            describe=describe_pod,
        )
    except WaitTimeout as error:
        obligations.fail("partitions.claim-beyond-counters-unschedulable", str(error), waiting)
    messages = _failed_scheduling(core, build.namespace, pod, timeouts.pod_scheduled)
    outcome = {"podScheduled": scheduling_state(decided), "failedScheduling": messages, "held": sorted(held)}
    allure.attach(json.dumps(outcome, indent=2), "scheduler outcome", allure.attachment_type.JSON)
    request.node.user_properties.append((RECORD_KIND, json.dumps(outcome)))
    obligations.check(
        "partitions.claim-beyond-counters-unschedulable",
        not decided.spec.node_name and _unschedulable(decided),
        describe_pod(decided),
        waiting,
    )
    obligations.check(
        "partitions.claim-beyond-counters-unschedulable",
        any(CANNOT_ALLOCATE in message for message in messages),
        f"no FailedScheduling event with {CANNOT_ALLOCATE!r}: {messages}",
        waiting,
    )
    unallocated = _allocated(tracker.get(RESOURCE_API, "ResourceClaim", name, build.namespace), target.driver)
    obligations.check(
        "partitions.claim-beyond-counters-unschedulable", not unallocated, f"allocated {unallocated}", waiting
    )

    with allure.step(f"free {sorted(held)}: delete pod {holder.pod['metadata']['name']} and claim {holder.ref.name}"):
        tracker.delete(holder.pod)
        tracker.delete(holder.claim)
    try:
        waits.until(
            lambda: core.read_namespaced_pod(pod, build.namespace),
            lambda p: bool(p.spec.node_name),
            timeout=timeouts.pod_scheduled,
            what=f"pod {pod} bound once {sorted(held)} was freed",
            describe=describe_pod,
        )
    except WaitTimeout as error:
        obligations.fail("partitions.claim-fits-once-partition-freed", str(error), where)
    allocated = _allocated(tracker.get(RESOURCE_API, "ResourceClaim", name, build.namespace), target.driver)
    obligations.check(
        "partitions.claim-fits-once-partition-freed",
        len(allocated) == most,
        f"claim {name} allocated {sorted(allocated)}, asked for {most}",
        where,
    )
    _check_within_counters(obligations, pools, allocated, f"claim {name} on {where}")


@pytest.mark.capability("partitionableDevices")
def test_prepare_of_co_allocated_partitions_reports_exactly_them_and_declared_status_names_each(
    partition_target: Callable[..., PartitionTarget],
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    driver_profile: DriverProfile,
    obligations: Obligations,
) -> None:
    """A claim for as many devices as fit together gets partitions that share counters; the kubelet prepares it."""
    target = partition_target(needs_prepare=True)
    pools = _pools(target, api_client, obligations)
    _check_references(obligations, pools)
    most = _most_together(target, pools)
    device_class = str(tracker.create(target.build.device_class())["metadata"]["name"])
    where = f"{target.driver} on {target.node}"
    try:
        claim = _allocate(target, tracker, api_client, device_class, timeout=timeouts.pod_scheduled, count=most)
    except WaitTimeout as error:
        obligations.fail("partitions.fitting-claim-allocated", str(error), where)
    allocated = _allocated(claim.claim, target.driver)
    _check_within_counters(obligations, pools, allocated, f"claim {claim.ref.name} on {where}")
    if not any(pool in pools and device in pools[pool].partitioned for pool, device in allocated):
        pytest.skip(f"not applicable: the scheduler allocated {sorted(allocated)}, none of which consumes counters")
    if target.endpoint is None:
        pytest.skip(f"not applicable: the kubelet-plugin socket of {target.driver} on {target.node} is not reachable")
    where = f"claim {claim.ref.name} ({len(allocated)} devices) on {where}"

    outcome = kubelet.prepare_outcome(target.endpoint, [claim.ref])
    answer = outcome.answer(claim.ref)
    if answer is None:
        obligations.fail("partitions.partition-claim-prepares", outcome.describe(), where)
    obligations.check("partitions.partition-claim-prepares", not answer.error, answer.error, where)
    reported = [(d["poolName"], d["deviceName"]) for d in answer.devices]
    wrong = [
        d
        for d in answer.devices
        if (d["poolName"], d["deviceName"]) not in allocated
        or (d["requestNames"] and allocated[d["poolName"], d["deviceName"]] not in d["requestNames"])
    ]
    answered = f"reported {answer.devices}, allocated {sorted(allocated.items())}"
    obligations.check("partitions.reported-devices-are-allocated-partitions", not wrong, f"{wrong}; {answered}", where)
    obligations.check(
        "partitions.every-allocated-partition-reported", sorted(reported) == sorted(allocated), answered, where
    )

    if driver_profile.declares(Capability.STATUS_DEVICES):
        _check_status(obligations, tracker, claim, target.driver, sorted(allocated), timeouts, where)
    kubelet.unprepare(target.endpoint, [claim.ref])


def _check_status(
    obligations: Obligations,
    tracker: ResourceTracker,
    claim: AllocatedClaim,
    driver: str,
    expected: list[Device],
    timeouts: Timeouts,
    where: str,
) -> None:
    """The driver's status.devices entries of the prepared claim name each allocated partition once."""

    def listed() -> list[Device]:
        current = tracker.get(RESOURCE_API, "ResourceClaim", claim.ref.name, claim.ref.namespace)
        return sorted((e["pool"], e["device"]) for e in device_statuses(current) if e["driver"] == driver)

    # The field may be written after prepare returns (by the driver or another component): judge it at the deadline.
    try:
        entries = waits.until(
            listed,
            lambda now: now == expected,
            timeout=timeouts.status_written,
            what=f"status entries of {driver}",
            describe=str,
        )
    except WaitTimeout:
        entries = listed()
    obligations.check("partitions.declared-status-written-for-partitions", bool(entries), entries, where)
    obligations.check(
        "partitions.status-entry-per-allocated-partition",
        entries == expected,
        f"entries {entries}, allocated {expected}",
        where,
    )
