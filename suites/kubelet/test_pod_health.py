"""Device health where operators look: the pod's status.

Since 1.36 (ResourceHealthStatus, beta, on by default) the kubelet copies what a driver's health stream says of
each device a container was allocated into `status.containerStatuses[].allocatedResourcesStatus`: an entry per
claim of the container (`claim:<name>` or `claim:<name>/<request>`), one resource per device, Healthy, Unhealthy,
or Unknown where the stream never named the device. That answers "is the device this pod got healthy?" without
reading the driver. The checks only read pods, so they run on any cluster with a real kubelet; the health change
needs a way to fail a device on request: the profile's `health` hook, else the reference driver's fault switch.
Obligations: `dra_conformance/model/registry/kubelet.yaml`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import allure
import pytest
from kubernetes import client

from dra_conformance.driver import health_hook
from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.real_node import RealNodeTarget, running_pod
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.errors import UsageError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# The real node is one per machine and every kubelet-mode check leases it in turn: on one xdist worker they take
# turns without a lease wait that grows with the checks before it (the lease deadline timed out at 15 checks).
pytestmark = [pytest.mark.capability(str(Capability.HEALTH_STREAM)), pytest.mark.xdist_group("real-node")]

# The kubelet's entry name for a container's claim without a request (ResourceStatus.name in core/v1).
CLAIM_ENTRY = "claim:{claim}"


def health_entries(pod: client.V1Pod) -> dict[str, list[str]]:
    """Per allocatedResourcesStatus entry of the pod's containers, the health of each resource in it."""
    entries: dict[str, list[str]] = {}
    for status in pod.status.container_statuses or []:
        for entry in status.allocated_resources_status or []:
            entries[entry.name] = [str(resource.health) for resource in entry.resources or []]
    return entries


def unhealthy_messages(pod: client.V1Pod, entry: str) -> list[str]:
    """The message of each Unhealthy resource of the pod's allocatedResourcesStatus entry `entry` ("" for none)."""
    return [
        str(resource.message or "")
        for status in pod.status.container_statuses or []
        for found in status.allocated_resources_status or []
        if found.name == entry
        for resource in found.resources or []
        if resource.health == "Unhealthy"
    ]


def _allocated(tracker: ResourceTracker, namespace: str, claim: str, driver: str) -> list[dict[str, Any]]:
    allocation = (tracker.get(RESOURCE_API, "ResourceClaim", claim, namespace).get("status") or {}).get("allocation")
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    return [result for result in results if result["driver"] == driver]


def test_pod_status_reports_the_health_the_driver_streams_for_its_devices(
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
    driver_profile: DriverProfile,
    cluster: ClusterInfo,
) -> None:
    if not driver_profile.declares(Capability.HEALTH_STREAM):
        pytest.skip(f"not applicable: {Capability.HEALTH_STREAM} not declared")
    pod = running_pod(tracker, api_client, build, real_node, timeouts)
    name = pod.metadata.name
    use = pod.spec.resource_claims[0].name  # the container's claim: the kubelet names its entry after it
    claim = pod.spec.resource_claims[0].resource_claim_name
    devices = _allocated(tracker, namespace, claim, driver_profile.driver)
    entry = CLAIM_ENTRY.format(claim=use)
    where = f"pod {name} on {real_node.name}, claim {claim} ({[d['device'] for d in devices]})"

    def read() -> client.V1Pod:
        return client.CoreV1Api(api_client).read_namespaced_pod(name, namespace)

    def settled(entries: dict[str, list[str]]) -> bool:
        return len(entries.get(entry, [])) == len(devices) and "Unknown" not in entries[entry]

    try:
        seen = waits.until(
            lambda: health_entries(read()),
            settled,
            timeout=timeouts.pod_health,
            what=f"{entry} of pod {name} with a health for each of its {len(devices)} devices",
            describe=str,
        )
    except WaitTimeout:
        seen = health_entries(read())
    if not seen:
        pytest.skip(
            f"not applicable: the kubelet on {real_node.name} reports no allocatedResourcesStatus for pod {name} "
            "(its ResourceHealthStatus feature gate is off): the driver's health cannot be read from pod status there"
        )
    allure.attach(str(seen), "allocatedResourcesStatus, device healthy", allure.attachment_type.TEXT)
    obligations.check(
        "kubelet.pod-status-reports-streamed-health",
        settled(seen) and set(seen[entry]) == {"Healthy"},
        f"allocatedResourcesStatus after {timeouts.pod_health:g}s: {seen} (expected {entry}: Healthy x{len(devices)})",
        where,
    )
    hooks, endpoint = driver_profile.health, real_node.endpoint
    if (hooks is None and not driver_profile.fault_switches) or endpoint is None:
        return  # a health change on request needs the hook or the fault switch, on a node this machine reaches

    def health_becomes(wanted: str) -> dict[str, list[str]]:
        try:
            return waits.until(
                lambda: health_entries(read()),
                lambda entries: entries.get(entry) == [wanted] * len(devices),
                timeout=timeouts.pod_health,
                what=f"{entry} of pod {name} {wanted}",
                describe=str,
            )
        except WaitTimeout:
            return health_entries(read())

    with contextlib.ExitStack() as failed:
        if hooks is None:  # the reference driver's fault switch
            control = FakeDriverControl(endpoint)
            failed.callback(
                control.set_faults(
                    [*control.faults(), *({"mode": "unavailable", "device": d["device"]} for d in devices)]
                )
            )
        else:
            for device in devices:
                values = health_hook.hook_values(
                    driver_profile, endpoint, device["device"], device["pool"], cluster.details
                )
                try:
                    problem = health_hook.run(hooks.make_unhealthy, values)
                except UsageError as error:
                    pytest.skip(f"not applicable: the profile's health hook cannot run here: {error}")
                failed.callback(health_hook.run, hooks.make_healthy, values)
                if problem is not None:
                    obligations.fail(
                        "kubelet.pod-status-follows-health-change", f"health.makeUnhealthy: {problem}", where
                    )
        during = health_becomes("Unhealthy")
        messages = unhealthy_messages(read(), entry)
    after = health_becomes("Healthy")
    seen_text = f"during: {during}\nafter: {after}"
    allure.attach(seen_text, "allocatedResourcesStatus, fault and back", allure.attachment_type.TEXT)
    print(f"pod {name} allocatedResourcesStatus {seen_text}")  # shown with -rP
    obligations.check(
        "kubelet.pod-status-follows-health-change",
        during.get(entry) == ["Unhealthy"] * len(devices) and after.get(entry) == ["Healthy"] * len(devices),
        f"while its devices were failed ({'health.makeUnhealthy' if hooks else 'the unavailable fault'}): {during}; "
        f"after restoring them: {after}",
        where,
    )
    obligations.check(
        "kubelet.pod-status-unhealthy-carries-message",
        len(messages) == len(devices) and all(message.strip() for message in messages),
        f"messages of the Unhealthy resources of {entry}: {messages}",
        where,
    )
