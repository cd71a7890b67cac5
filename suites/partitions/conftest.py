"""Where partition checks run: a pool of partitions of the driver under test that no other test allocates from.

For the reference driver, a private instance started with its `gpu-partitions` device profile. For any other
driver that declares partitionableDevices, a leased node of it (a set-aside node on the local cluster): the node's
pools must then hold the partitions the profile declares, or the capability is not delivered.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.reference import PrivateDriver
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.builders import Builder
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.plugin.scenario_fixtures import shared_target

from .target import PartitionTarget

# The reference driver's device profile that publishes partitions (drivers/fake-dra/fake_dra/partitions.py).
PARTITIONS_PROFILE = "gpu-partitions"
# Physical devices of the private instance: one GPU publishes seven devices (whole, two halves, four quarters) on
# one counter set, of which four fit together; a second GPU would add scheduling work and nothing to check.
PHYSICAL_DEVICES = 1


@pytest.fixture
def partition_target(
    scenario_node: Callable[[str, tuple[str, ...]], str],
    private_driver: Callable[..., PrivateDriver],
    namespace: str,
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    driver_profile: DriverProfile,
    driver_under_test: DriverUnderTest,
) -> Callable[..., PartitionTarget]:
    """Returns the test's partitions on first call; `needs_prepare` asks for a node whose sockets this machine reaches.

    Set up before `kubelet` (it asks for `private_driver`), so the kubelet's leftover unprepares run while the
    private driver is still there.
    """

    def target(*, needs_prepare: bool = False) -> PartitionTarget:
        if not driver_profile.declares(Capability.PARTITIONABLE_DEVICES):
            pytest.skip(f"not applicable: {Capability.PARTITIONABLE_DEVICES} not declared")
        if driver_profile.declares(Capability.REFERENCE_FAULTS):
            # Started as a `gpu` instance whose last --profile wins: the instance's driver name (and so its socket
            # paths) derives from the profile given here, and `gpu-partitions` makes its registration socket path
            # longer than the 105 characters gRPC binds.
            driver = private_driver(devices=PHYSICAL_DEVICES, args=(f"--profile={PARTITIONS_PROFILE}",))
            node, process = next(iter(driver.processes.items()))
            return PartitionTarget(
                driver.name, node, Builder(namespace=namespace, driver=driver.name), (), process.endpoint
            )
        shared = shared_target(
            "partitionable devices",
            needs_prepare=needs_prepare,
            cluster=cluster,
            driver=driver_under_test,
            api_client=api_client,
            lease=scenario_node,
        )
        build = Builder(namespace=namespace, driver=shared.driver)
        return PartitionTarget(shared.driver, shared.node, build, shared.tolerations, shared.endpoint)

    return target
