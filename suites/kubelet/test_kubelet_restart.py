"""A kubelet restart with claims in use and one prepare in flight: what runs keeps running, what waited gets prepared.

On a node a real kubelet serves, where the backend can restart that kubelet (the local backend's real node): one
pod runs with a claim; a second pod's NodePrepareResources is held in the kubelet-side interposer when the kubelet
is restarted (SIGTERM, then started again, as `systemctl restart kubelet` does). Afterwards the running pod must
still run in the same container with its claim prepared, the held pod must run once the new kubelet prepared its
claim, and a new pod must get its device, which needs the driver registered with the new kubelet.
"""

from __future__ import annotations

import functools

import pytest
from kubernetes import client

from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.real_node import RealNodeTarget, await_ready, claimed_pod, pod_on, running_pod
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder, ClaimUse
from dra_conformance.kube.pods import describe_pod
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.interposer import PREPARE, InterposedFault, KubeletInterposer
from dra_conformance.model.cluster import KubeletRestarts
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# A new kubelet registers its node, finds the plugins and syncs its pods within seconds; a prepare it retries
# comes after its pod worker's back-off (up to a minute on a busy machine).
AFTER_RESTART_DEADLINE = 120.0


# The real node is one per machine and every kubelet-mode check leases it in turn: on one xdist worker they take
# turns without a lease wait that grows with the checks before it (the lease deadline timed out at 15 checks).
pytestmark = pytest.mark.xdist_group("real-node")


def _container(pod: client.V1Pod) -> tuple[str, int]:
    status = (pod.status.container_statuses or [None])[0]
    return (status.container_id or "", status.restart_count) if status is not None else ("", 0)


def _claims_in_flight(interposer: KubeletInterposer, claim: str) -> bool:
    return any(method == PREPARE and claim in claims for method, claims in list(interposer.entered))


def test_a_kubelet_restart_keeps_running_pods_and_their_claims_and_prepares_the_claim_in_flight(
    interposer: KubeletInterposer,
    kubelet_restarts: KubeletRestarts,
    real_node: RealNodeTarget,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    core = client.CoreV1Api(api_client)
    first, first_claim = claimed_pod(tracker, build, real_node)
    name = first["metadata"]["name"]
    running = await_ready(api_client, namespace, name, timeouts.pod_running, f"pod {name} Ready")
    claim_uid = str(first_claim["metadata"]["uid"])
    specs_before = real_node.cdi_specs.read() if real_node.cdi_specs is not None else None
    before = _container(running)

    # Not `claimed_pod`: the hold names the claim, so it is in place before the pod exists.
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    held_claim = tracker.create(build.claim(device_class))
    held_uid = str(held_claim["metadata"]["uid"])
    interposer.set_faults([InterposedFault(PREPARE, "hang", claim=held_uid)])
    held_pod = tracker.create(pod_on(build, real_node, [ClaimUse("devices", claim=held_claim["metadata"]["name"])]))
    held = str(held_pod["metadata"]["name"])
    where = f"node {real_node.name}, pods {running.metadata.name} (running) and {held} (prepare held)"
    try:
        waits.until(
            lambda: _claims_in_flight(interposer, held_uid),
            bool,
            timeout=timeouts.pod_running,
            what=f"the kubelet's NodePrepareResources of claim {held_uid} held in the interposer",
        )
    except WaitTimeout as error:
        obligations.fail("kubelet.prepare-in-flight-reached-the-interposer", str(error), where)
    kubelet_restarts.restart_kubelet(real_node.name)
    interposer.set_faults([])  # the held call ends; the new kubelet prepares the claim again

    try:
        waits.until(
            functools.partial(node_pools, api_client, driver_under_test.name, real_node.name),
            lambda pools: bool(pools) and all(pool.complete for pool in pools.values()),
            timeout=AFTER_RESTART_DEADLINE,
            what=f"a complete pool of {driver_under_test.name} on {real_node.name} after the kubelet restart",
            describe=lambda pools: [pool.describe() for pool in pools.values()] or "no pool",
        )
    except WaitTimeout as error:
        obligations.fail("kubelet.pool-published-again-after-restart", str(error), where)
    try:
        await_ready(api_client, namespace, held, AFTER_RESTART_DEADLINE, f"pod {held} Ready after the kubelet restart")
    except WaitTimeout as error:
        obligations.fail("kubelet.claim-in-flight-prepared-after-restart", str(error), where)
    after = core.read_namespaced_pod(running.metadata.name, namespace)
    obligations.check(
        "kubelet.restart-leaves-running-pods-running",
        _container(after) == before and after.status.phase == "Running",
        f"container (id, restarts) before {before}, after {_container(after)}: {describe_pod(after)}",
        where,
    )
    kept = {path for path, text in (specs_before or {}).items() if claim_uid in path or claim_uid in text}
    # A driver may prepare a claim without a CDI spec that names it (devices that need no injection, specs per
    # device): then the specs say nothing about this claim, and only the driver's own record (below) can.
    if kept and real_node.cdi_specs is not None:
        now = real_node.cdi_specs.read()
        obligations.check(
            "kubelet.restart-keeps-claims-of-running-pods-prepared",
            kept <= set(now),
            f"CDI specs of claim {claim_uid} before the restart {sorted(kept)}, after: {sorted(now)}",
            where,
        )
    if driver_under_test.profile.fault_switches and real_node.endpoint is not None:
        prepared = FakeDriverControl(real_node.endpoint).prepared()
        obligations.check(
            "kubelet.restart-keeps-claims-of-running-pods-prepared",
            claim_uid in prepared,
            f"the driver holds prepared {sorted(prepared)}, not the running pod's claim {claim_uid}",
            where,
        )

    # The held pod's device goes back to the pool, so the new pod does not depend on how many devices the node has.
    tracker.delete(held_pod)
    tracker.delete(held_claim)
    fresh = running_pod(tracker, api_client, build, real_node, timeouts, wait=False).metadata.name
    try:
        await_ready(api_client, namespace, fresh, AFTER_RESTART_DEADLINE, f"new pod {fresh} Ready after the restart")
    except WaitTimeout as error:
        obligations.fail("kubelet.driver-registers-again-after-restart", str(error), f"pod {fresh} on {real_node.name}")
    # What ran and what was seen, shown with -rP.
    print(
        f"running pod {running.metadata.name}: container (id, restarts) before {before}, after {_container(after)}, "
        f"phase {after.status.phase}\n"
        f"claim {claim_uid}: CDI specs naming it before {sorted(kept)}, after "
        f"{sorted(kept & set(real_node.cdi_specs.read())) if real_node.cdi_specs is not None else 'not readable'}\n"
        f"held pod {held}: its prepare held in the interposer across the restart, then Ready\n"
        f"new pod {fresh}: Ready after the restart (the driver registered with the new kubelet)"
    )
