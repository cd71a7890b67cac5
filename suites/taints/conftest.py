"""Where taint checks run: devices of the driver under test that no other test can be allocated or evicted from.

For the reference driver, a private instance with a driver name of its own: a rule selecting that driver touches
nothing else. For any other driver, a leased node of it (a set-aside node on the local cluster), and rules that
select only that node's pools.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.taint_target import TaintTarget
from dra_conformance.kube.builders import Builder
from dra_conformance.scenarios.runner import ScenarioTarget

# NoExecute checks need one device for a pod that is evicted and one for a pod that tolerates the taint.
DEVICES_NEEDED = 2


@pytest.fixture
def taint_target(
    device_target: Callable[..., ScenarioTarget], namespace: str, driver_profile: DriverProfile
) -> TaintTarget:
    """Devices of the driver under test on one node that only this test uses."""
    if not driver_profile.declares(Capability.REFERENCE_FAULTS) and driver_profile.devices.per_node < DEVICES_NEEDED:
        pytest.skip(
            f"not applicable: taint checks need {DEVICES_NEEDED} devices on one node; {driver_profile.source.name} "
            f"declares {driver_profile.devices.per_node}"
        )
    target = device_target("device taints", devices=DEVICES_NEEDED)
    build = Builder(namespace=namespace, driver=target.driver)
    return TaintTarget(target.driver, target.node, target.tolerations, build, target.control)
