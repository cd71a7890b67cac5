"""Where partition checks run: a pool of partitions of the driver under test that no other test allocates from.

For the reference driver, a private instance started with its `gpu-partitions` device profile. For any other
driver that declares partitionableDevices, a leased node of it (a set-aside node on the local cluster): the node's
pools must then hold the partitions the profile declares, or the capability is not delivered.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.kube.builders import Builder
from dra_conformance.scenarios.runner import ScenarioTarget

from .target import PartitionTarget

# The reference driver's device profile that publishes partitions (drivers/fake-dra-go/partitions.go).
PARTITIONS_PROFILE = "gpu-partitions"
# Physical devices of the private instance: one GPU publishes seven devices (whole, two halves, four quarters) on
# one counter set, of which four fit together; a second GPU would add scheduling work and nothing to check.
PHYSICAL_DEVICES = 1


@pytest.fixture
def partition_target(
    device_target: Callable[..., ScenarioTarget], namespace: str, driver_profile: DriverProfile
) -> Callable[..., PartitionTarget]:
    """Returns the test's partitions on first call; `needs_prepare` asks for a node whose sockets this machine reaches.

    Set up before `kubelet` (it asks for `private_driver`), so the kubelet's leftover unprepares run while the
    private driver is still there.
    """

    def target(*, needs_prepare: bool = False) -> PartitionTarget:
        if not driver_profile.declares(Capability.PARTITIONABLE_DEVICES):
            pytest.skip(f"not applicable: {Capability.PARTITIONABLE_DEVICES} not declared")
        # The reference driver starts as a `gpu` instance whose last --profile wins: the instance's driver name (and
        # so its socket paths) derives from the profile given here, and `gpu-partitions` makes its registration
        # socket path longer than the 105 characters gRPC binds.
        found = device_target(
            "partitionable devices",
            devices=PHYSICAL_DEVICES,
            args=(f"--profile={PARTITIONS_PROFILE}",),
            needs_prepare=needs_prepare,
        )
        build = Builder(namespace=namespace, driver=found.driver, hold=found.hold)
        return PartitionTarget(found.driver, found.node, build, found.tolerations, found.endpoint)

    return target
