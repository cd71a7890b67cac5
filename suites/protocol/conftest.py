"""Claims the protocol checks prepare: allocated by the real scheduler for the driver under test."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.timeouts import Timeouts

from .node_claims import ClaimsOnOneNode, claims_that_fit


@pytest.fixture
def device_class(tracker: ResourceTracker, build: Builder) -> str:
    """A DeviceClass selecting the driver under test."""
    return str(tracker.create(build.device_class())["metadata"]["name"])


@pytest.fixture
def allocated(
    held_nodes: None,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
) -> AllocatedClaim:
    """One claim allocated to a node the scheduler picks, and its bound pod."""
    return allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled)


@pytest.fixture
def allocated_on_disruption_node(
    disruption: Disruption,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
) -> AllocatedClaim:
    """One claim allocated on the disruption node, whose pod tolerates its taint."""
    return disruption.allocate(tracker, build, api_client, device_class, timeouts.pod_scheduled)


@pytest.fixture
def claims_on_one_node(
    held_nodes: None,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
) -> Callable[..., ClaimsOnOneNode]:
    """Allocates up to `wanted` claims (of `devices` each) on the driver's first node (`claims_that_fit`)."""

    def allocate_on_one_node(wanted: int, *, minimum: int = 2, devices: int = 1) -> ClaimsOnOneNode:
        count = claims_that_fit(driver_under_test, wanted, f"{minimum} claim(s)", minimum=minimum, devices=devices)
        node, endpoint = next(iter(driver_under_test.endpoints.items()))
        claims = [
            allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled, node=node, count=devices)
            for _ in range(count)
        ]
        return ClaimsOnOneNode(node, endpoint, claims)

    return allocate_on_one_node
