"""Claim lifecycle across the driver and the node: restarts, and readiness only after prepare."""

from __future__ import annotations

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.pods import pod_ready
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.cluster import BackendCapability, ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# Every check here talks to the driver's sockets: not applicable where this machine cannot reach them.
pytestmark = pytest.mark.usefixtures("driver_sockets")


def test_pod_becomes_ready_only_after_the_kubelet_prepared_its_claim(
    cluster: ClusterInfo,
    driver_under_test: DriverUnderTest,
    namespace: str,
    api_client: client.ApiClient,
    kubelet: KubeletRole,
    timeouts: Timeouts,
    allocated: AllocatedClaim,
    obligations: Obligations,
) -> None:
    if BackendCapability.KWOK_NODES not in cluster.capabilities or allocated.node in cluster.real_nodes:
        pytest.skip(
            "not applicable: on real nodes the kubelet prepares claims itself; this checks the fake-node stand-in"
        )
    claim = allocated
    core = client.CoreV1Api(api_client)
    pod_name = claim.pod["metadata"]["name"]
    where = f"pod {pod_name} on {claim.node}"

    def read() -> client.V1Pod:
        return core.read_namespaced_pod(pod_name, namespace)

    before = read()
    obligations.check("protocol.pod-not-ready-before-prepare", not pod_ready(before), before.status.conditions, where)
    check_prepare_answer(
        obligations,
        claim,
        driver_under_test.name,
        kubelet.prepare_outcome(driver_under_test.endpoints[claim.node], [claim.ref]),
        "prepare",
    )
    kubelet.start_containers(namespace, pod_name)
    try:
        after = waits.until(
            read,
            pod_ready,
            timeout=timeouts.pod_ready,
            what=f"pod {pod_name} Ready after prepare",
            describe=lambda p: p.status.conditions,
        )
    except WaitTimeout:
        after = read()
    obligations.check("protocol.pod-ready-after-prepare", pod_ready(after), after.status.conditions, where)


def test_driver_killed_after_a_prepare_comes_back_with_its_pool_and_unprepares(
    disruption: Disruption,
    allocated_on_disruption_node: AllocatedClaim,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    claim = allocated_on_disruption_node
    check_prepare_answer(
        obligations,
        claim,
        driver_under_test.name,
        kubelet.prepare_outcome(disruption.endpoint, [claim.ref]),
        "prepare before the kill",
    )
    before = node_pools(api_client, driver_under_test.name, disruption.node)

    with allure.step(f"SIGKILL the driver on {disruption.node}, then start it again"):
        disruption.kill()
        disruption.start()  # waits until it registered again with a complete pool

    after = node_pools(api_client, driver_under_test.name, disruption.node)
    where = f"node {disruption.node}"
    pools = f"before {before}, after {after}"
    obligations.check(
        "protocol.restart-republishes-same-devices",
        {name: pool.devices for name, pool in after.items()} == {name: pool.devices for name, pool in before.items()},
        pools,
        where,
    )
    obligations.check(
        "protocol.restart-keeps-pool-generation",
        all(after[name].generation >= pool.generation for name, pool in before.items() if name in after),
        pools,
        where,
    )
    check_unprepare(
        obligations,
        kubelet,
        disruption.endpoint,
        claim.ref,
        "protocol.unprepare-after-restart-succeeds",
        "unprepare after the restart",
    )
    meta = claim.claim["metadata"]
    left_status = [
        entry
        for entry in device_statuses(tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))
        if entry["driver"] == driver_under_test.name
    ]
    where = f"claim {claim.ref.name} on {disruption.node}, unprepared after a restart"
    obligations.check("protocol.status-entries-removed-after-unprepare", not left_status, left_status, where)
    cdi_dir = disruption.endpoint.cdi_dir
    left = (
        [p.name for p in sorted(cdi_dir.iterdir()) if claim.ref.uid in p.name] if cdi_dir and cdi_dir.is_dir() else []
    )
    obligations.check("protocol.unprepare-after-restart-removes-cdi-specs", not left, left, where)
