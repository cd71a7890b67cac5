"""Health over time on a real node: what the kubelet reports of a claim and its devices while the driver comes and goes.

Two things a kubelet keeps of a driver's claims, read where operators read them (issue 44, item 6):

- `dra_resource_claims_in_use`, the kubelet's gauge of the claims it holds prepared per driver
  (`kubelet.dra_metrics`). A claim counts once the driver prepared it and stops counting only once the driver's
  NodeUnprepareResources succeeded for it, so the gauge falling back once a pod is gone is cheap evidence that
  unprepare really happened. Other checks may use the node at the same time, so the gauge is held to the claims of
  the driver still reserved for pods on the node, read from the API in the same poll, not to 0.
- A running pod's `allocatedResourcesStatus`: when the driver's health stream ends (its instance on the node is
  stopped) the kubelet forgets the driver's device health and reads the devices Unknown; nothing tells the pod's
  worker, so the pod's status says so on the pod's next periodic sync (`kubelet.pod_sync`: 1.5 x the kubelet's
  syncFrequency, read from its /configz, plus a status post). Once the driver runs again its new stream names the
  devices and the pod reads Healthy again. The driver is stopped on the node the `disruption` fixture sets aside: a
  real node where the driver is installed as DaemonSet pods on two or more; elsewhere not applicable.

No broken mode of the reference driver fails the gauge check short of one whose unprepare fails outright (which
many checks catch first): the kubelet keeps the gauge itself. Obligations:
`dra_conformance/model/registry/kubelet.yaml`.
"""

from __future__ import annotations

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.real_node import RealNodeTarget, running_pod
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.tracker import ResourceTracker, TrackedObject
from dra_conformance.kubelet import claims_in_use, dra_metrics, pod_sync
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# The real node is one per machine and every kubelet-mode check leases it in turn: on one xdist worker they take
# turns without a lease wait that grows with the checks before it.
pytestmark = pytest.mark.xdist_group("real-node")

# The kubelet's entry name for a container's claim without a request (ResourceStatus.name in core/v1).
CLAIM_ENTRY = "claim:{claim}"


def test_claims_in_use_counts_a_running_pods_claim_and_falls_back_once_the_pod_is_gone(
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    driver, node = build.driver, real_node.name
    reading, why = dra_metrics.read(api_client, node)
    if reading is None:
        pytest.skip(f"not applicable: the kubelet's dra_resource_claims_in_use cannot be read: {why}")
    pod = running_pod(tracker, api_client, build, real_node, timeouts)
    name = pod.metadata.name
    claim = f"{namespace}/{pod.spec.resource_claims[0].resource_claim_name}"
    where = f"pod {name} on {node}, claim {claim}, driver {driver}"
    running = claims_in_use.await_settled(
        api_client,
        driver,
        node,
        lambda seen: seen.gauge is not None and seen.gauge >= 1,
        f"dra_resource_claims_in_use of {driver} on {node} at least 1 while pod {name} runs",
    )
    obligations.check(
        "kubelet.claims-in-use-counts-running-claim",
        running.gauge is not None and running.gauge >= 1 and claim in running.reserved,
        f"while pod {name} runs: {running}",
        where,
    )
    tracker.delete(TrackedObject("v1", "Pod", name, namespace))  # gracefully: gone once the kubelet finished it
    after = claims_in_use.await_settled(
        api_client,
        driver,
        node,
        lambda seen: seen.no_more_than_reserved() and claim not in seen.reserved,
        f"claim {claim} no longer reserved and dra_resource_claims_in_use of {driver} on {node} no higher than its "
        "claims still reserved there",
    )
    allure.attach(f"running: {running}\nafter: {after}", "dra_resource_claims_in_use", allure.attachment_type.TEXT)
    obligations.check(
        "kubelet.claims-in-use-drops-after-unprepare",
        after.no_more_than_reserved(),
        f"pod {name} gone, then within {claims_in_use.CLAIMS_IN_USE_DEADLINE:g}s: {after} (while it ran: {running})",
        where,
    )


def _health(pod: client.V1Pod, entry: str) -> list[str]:
    """The health of each resource of the pod's allocatedResourcesStatus entry `entry`."""
    for status in pod.status.container_statuses or []:
        for found in status.allocated_resources_status or []:
            if found.name == entry:
                return [str(resource.health) for resource in found.resources or []]
    return []


@pytest.mark.capability(str(Capability.HEALTH_STREAM))
def test_pod_health_reads_unknown_while_the_driver_is_stopped_and_healthy_once_it_runs_again(
    disrupted_real_node: RealNodeTarget,
    disruption: Disruption,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
    driver_profile: DriverProfile,
) -> None:
    if not driver_profile.declares(Capability.HEALTH_STREAM):
        pytest.skip(f"not applicable: {Capability.HEALTH_STREAM} not declared")
    node = disrupted_real_node.name
    pod = running_pod(tracker, api_client, build, disrupted_real_node, timeouts)
    name = pod.metadata.name
    entry = CLAIM_ENTRY.format(claim=pod.spec.resource_claims[0].name)
    claim = pod.spec.resource_claims[0].resource_claim_name
    allocation = (tracker.get(RESOURCE_API, "ResourceClaim", claim, namespace).get("status") or {}).get("allocation")
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    devices = [result["device"] for result in results if result["driver"] == driver_profile.driver]
    where = f"pod {name} on {node}, claim {claim} ({devices})"
    core = client.CoreV1Api(api_client)

    def health_becomes(wanted: str, timeout: float) -> list[str]:
        try:
            seen: list[str] = waits.until(
                lambda: _health(core.read_namespaced_pod(name, namespace), entry),
                lambda health: health == [wanted] * len(devices),
                timeout=timeout,
                what=f"{entry} of pod {name} {wanted} x{len(devices)}",
                describe=str,
            )
            return seen
        except WaitTimeout:
            return _health(core.read_namespaced_pod(name, namespace), entry)

    before = health_becomes("Healthy", timeouts.pod_health)
    if before != ["Healthy"] * len(devices):
        # Unknown before the stop cannot turn Unknown: kubelet.pod-status-reports-streamed-health rates this.
        pytest.skip(
            f"not applicable: {entry} of pod {name} is {before or 'absent'} after {timeouts.pod_health:g}s, not "
            f"Healthy x{len(devices)}: a stopped driver's devices turning Unknown cannot be told apart"
        )
    sync_seconds, sync_source = pod_sync.sync_frequency(api_client, node)
    window = pod_sync.unannounced_status_window(sync_seconds)
    with allure.step(f"stop the driver on {node} (SIGTERM, as the kubelet stops its pod)"):
        if disruption.terminate() is None:
            disruption.kill()
    try:
        during = health_becomes("Unknown", window)
    finally:
        with allure.step(f"start the driver on {node} again"):
            disruption.start()  # waits for its registration and a complete pool
    after = health_becomes("Healthy", timeouts.pod_health)
    seen = f"before the stop: {before}\nwhile stopped: {during}\nstarted again: {after}"
    allure.attach(seen, "allocatedResourcesStatus across a driver stop", allure.attachment_type.TEXT)
    print(f"pod {name} {entry} {seen}")  # shown with -rP
    obligations.check(
        "kubelet.pod-health-unknown-while-driver-stopped",
        during == ["Unknown"] * len(devices),
        f"{entry} {window:g}s after the stop (window from {sync_source}): {during}; before it {before}",
        where,
    )
    obligations.check(
        "kubelet.pod-health-healthy-after-driver-restart",
        after == ["Healthy"] * len(devices),
        f"{entry} {timeouts.pod_health:g}s after the driver started again: {after}; before the stop {before}",
        where,
    )
