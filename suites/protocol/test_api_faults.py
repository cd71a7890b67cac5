"""API faults any driver meets in a real cluster: a slow API server, bursts of 429/503, dropped connections.

The driver on the disruption node is restarted with its kubeconfig pointing at a proxy the test controls. Its
slices must stay published; where it declares status.devices, a prepare it reports successful must not have lost
that write (beyond the contract: a defensive obligation, since the API says nothing about it).
"""

from __future__ import annotations

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import Capability
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.fault_proxy import STATUS_WRITES, ApiFaultProxy, FaultPlan
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import check_prepare_answer
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# Added to every status write: slow, but far inside the kubelet's 45 s call deadline.
STATUS_WRITE_LATENCY = 0.3
# A burst a well-behaved client rides out with its retries: rate limited, then unavailable, twice each.
STATUS_WRITE_BURST = [429, 503, 429, 503]
# Then the connection of one status write is dropped without an answer.
STATUS_WRITE_DROPS = 1


@pytest.mark.capability("statusDevices")
def test_driver_keeps_its_slices_and_its_declared_status_through_api_faults(
    disruption: Disruption,
    allocated_on_disruption_node: AllocatedClaim,
    api_fault_proxy: ApiFaultProxy,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    kubelet: KubeletRole,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    claim = allocated_on_disruption_node
    if not disruption.reroutable:
        pytest.skip(
            f"not applicable: the driver on {disruption.node} runs as DaemonSet pods, which read the API server's "
            "address from their pod spec, not from a kubeconfig the suite can point at its fault proxy"
        )
    with allure.step(f"restart the driver on {disruption.node} behind the fault proxy"):
        disruption.route_through(api_fault_proxy.url)
    api_fault_proxy.plan = FaultPlan(STATUS_WRITES, STATUS_WRITE_LATENCY, list(STATUS_WRITE_BURST), STATUS_WRITE_DROPS)
    outcome = kubelet.prepare_outcome(disruption.endpoint, [claim.ref])
    pools = node_pools(api_client, driver_under_test.name, disruption.node)
    where = f"node {disruption.node}, claim {claim.ref.name}"
    obligations.check(
        "protocol.pool-stays-complete-through-api-faults",
        bool(pools) and all(pool.complete for pool in pools.values()),
        pools,
        where,
    )
    declared = driver_under_test.profile.declares(Capability.STATUS_DEVICES)
    if outcome.prepared(claim.ref) and declared:
        meta = claim.claim["metadata"]

        def mine() -> list[dict[str, object]]:
            current = tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"])
            return [e for e in device_statuses(current) if e["driver"] == driver_under_test.name]

        try:
            written = waits.until(
                mine, bool, timeout=timeouts.status_written, what="status.devices written", describe=str
            )
        except WaitTimeout:
            written = []
        obligations.check(
            "protocol.declared-status-survives-api-faults",
            bool(written),
            {"faults injected": api_fault_proxy.injected, "entries": mine()},
            where,
        )
    api_fault_proxy.plan = FaultPlan()
    check_prepare_answer(
        obligations,
        claim,
        driver_under_test.name,
        kubelet.prepare_outcome(disruption.endpoint, [claim.ref]),
        "prepare once the API server behaves again",
    )
    if declared:
        obligations.check(
            "protocol.api-faults-injected",
            bool(api_fault_proxy.injected),
            f"no fault injected: the driver never wrote status through the proxy (prepare: {outcome.describe()})",
            where,
        )
