"""Claims the protocol checks prepare: allocated by the real scheduler for the driver under test."""

from __future__ import annotations

import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.timeouts import Timeouts


@pytest.fixture
def device_class(tracker: ResourceTracker, build: Builder) -> str:
    """A DeviceClass selecting the driver under test."""
    return str(tracker.create(build.device_class())["metadata"]["name"])


@pytest.fixture
def allocated(
    tracker: ResourceTracker, build: Builder, api_client: client.ApiClient, device_class: str, timeouts: Timeouts
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
