"""The explorer's budget and seed (`dra-conformance explore` sets them), and the DeviceClass its claims ask for.

The options are the suite tier's: a default run explores within a small budget, from a seed derived from the run's
id, so every run explores other sequences and says which seed it used. They are registered here, where the suite is,
so a run that does not collect it never shows them; `dra-conformance explore` passes them for its own budget.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.reference import PrivateDrivers, reference_program
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.leaks import LeakError
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import BackendCapability, ClusterInfo
from dra_conformance.timeouts import Timeouts

# The suite tier in a default run: a minute of exploring and a minute of shrinking at most, examples of up to 12
# operations (each claim is a pod the scheduler binds, each restart a process start with a complete pool).
TIER_SECONDS = 60.0
TIER_SHRINK_SECONDS = 60.0
TIER_MAX_EXAMPLES = 50
TIER_MAX_STEPS = 12
# The other driver of claims that mix two drivers: a private instance of the reference driver on the explorer's node,
# with NIC devices (nic-0, ...), whose names no GPU of the driver under test shares. The explorer never asks it to
# prepare anything, so it never writes a status entry.
OTHER_PROFILE = "nic"
OTHER_DEVICES = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    """--dra-explore-*: the exploration's seed and budget."""
    group = parser.getgroup("dra-explore", "DRA conformance: the model-based explorer (suites/explore)")
    group.addoption("--dra-explore-seed", type=int, default=None, help="seed (default: derived from the run's id)")
    group.addoption(
        "--dra-explore-seconds",
        type=float,
        default=TIER_SECONDS,
        help=f"seconds of drawing new examples; 0: no time limit (default {TIER_SECONDS:g})",
    )
    group.addoption(
        "--dra-explore-shrink-seconds",
        type=float,
        default=TIER_SHRINK_SECONDS,
        help=f"seconds of shrinking after the first finding (default {TIER_SHRINK_SECONDS:g})",
    )
    group.addoption(
        "--dra-explore-max-examples",
        type=int,
        default=TIER_MAX_EXAMPLES,
        help=f"examples (operation sequences) at most (default {TIER_MAX_EXAMPLES})",
    )
    group.addoption(
        "--dra-explore-max-steps",
        type=int,
        default=TIER_MAX_STEPS,
        help=f"operations per example at most (default {TIER_MAX_STEPS})",
    )


@pytest.fixture
def device_class(tracker: ResourceTracker, build: Builder) -> str:
    """A DeviceClass selecting the driver under test."""
    return str(tracker.create(build.device_class())["metadata"]["name"])


@pytest.fixture
def other_driver(
    cluster: ClusterInfo,
    dynamic_client: DynamicClient,
    api_client: client.ApiClient,
    tracker: ResourceTracker,
    build: Builder,
    timeouts: Timeouts,
    disruption: Disruption,
) -> Iterator[tuple[str, str] | None]:
    """Another driver on the explorer's node and a DeviceClass of it, for claims that mix two drivers.

    Where the backend runs private reference driver instances (the local backend, whatever the driver under test);
    None elsewhere.
    """
    if BackendCapability.REFERENCE_DRIVER not in cluster.capabilities:
        yield None
        return
    drivers = PrivateDrivers(
        dynamic_client,
        api_client,
        tracker,
        build.namespace,
        (disruption.node,),
        timeouts,
        program=reference_program(cluster.details),
    )
    try:
        name = drivers.start(profile=OTHER_PROFILE, devices=OTHER_DEVICES).name
        selector = {"cel": {"expression": f'device.driver == "{name}"'}}
        device_class = tracker.create(
            {
                "apiVersion": RESOURCE_API,
                "kind": "DeviceClass",
                "metadata": {"name": build.cluster_name("other-class")},
                "spec": {"selectors": [selector]},
            }
        )
        yield name, str(device_class["metadata"]["name"])
    finally:
        leaks = drivers.cleanup()
    if leaks:
        raise LeakError(f"the other driver of the explorer's claims left behind: {leaks}")
