"""Where consumable-capacity checks run: one shareable device of the driver under test that only this test allocates.

For the reference driver, a private instance of its `gpu-shared` device profile with one device. For any other
driver, a leased node of it and the first device there that allows multiple allocations, selected by an attribute
value only it has on that node. A profile that does not declare consumableCapacity makes the checks not applicable;
one that declares it while the node publishes no shareable device fails (a capability declared and not delivered).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.shared_capacity import SharePlan, device_selector, plan_shares, shareable
from dra_conformance.kube.builders import Builder, Manifest
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.model.findings import Obligations
from dra_conformance.scenarios.runner import ScenarioTarget

# The reference driver's device profile with shareable devices (drivers/fake-dra-go/shared.go).
REFERENCE_PROFILE = "gpu-shared"


@dataclass(frozen=True)
class SharedDevice:
    """One shareable device of one driver on one node, the requests that share it, and a builder for its claims."""

    driver: str
    node: str
    pool: str
    device: str
    spec: dict[str, Any]
    plan: SharePlan
    # A CEL selector that matches this device alone among the node's devices of the driver.
    selector: str
    tolerations: tuple[Manifest, ...]
    endpoint: DriverEndpoint | None
    build: Builder


@pytest.fixture
def shared_device(
    device_target: Callable[..., ScenarioTarget],
    namespace: str,
    api_client: client.ApiClient,
    driver_profile: DriverProfile,
    obligations: Obligations,
) -> SharedDevice:
    """A shareable device of the driver under test that only this test allocates."""
    if not driver_profile.declares(Capability.CONSUMABLE_CAPACITY):
        pytest.skip("not applicable: consumableCapacity not declared")
    target = device_target("consumable capacity", devices=1, profile=REFERENCE_PROFILE)
    name, node, endpoint, tolerations = target.driver, target.node, target.endpoint, target.tolerations
    pools = {pool: state for pool, state in node_pools(api_client, name, node).items() if state.complete}
    found = [(pool, device, spec) for pool, state in pools.items() for device, spec in state.device_specs.items()]
    candidates = [(pool, device, spec) for pool, device, spec in found if shareable(spec)]
    obligations.check(
        "capacity.declared-shared-device-published",
        bool(candidates),
        f"{len(found)} devices in complete pools, none with allowMultipleAllocations and capacity: "
        f"{[p.describe() for p in pools.values()] or 'no pool'}",
        f"driver {name} on node {node}",
    )
    for pool, device, spec in candidates:
        plan = plan_shares(device, spec)
        selector = device_selector(name, device, {d: s for p, d, s in found if p == pool})
        if plan is not None and selector is not None:
            return SharedDevice(
                name,
                node,
                pool,
                device,
                spec,
                plan,
                selector,
                tolerations,
                endpoint,
                Builder(namespace, name, target.hold),
            )
    pytest.skip(
        f"not applicable: no shareable device of {name} on {node} can be shared by 2 to a few claims and told apart "
        "by an attribute in a CEL selector: "
        f"{obligations.mask([(d, s.get('capacity'), s.get('attributes')) for _, d, s in candidates])}"
    )
