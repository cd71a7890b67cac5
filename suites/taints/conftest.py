"""Where taint checks run: devices of the driver under test that no other test can be allocated or evicted from.

For the reference driver, a private instance with a driver name of its own: a rule selecting that driver touches
nothing else. For any other driver, a leased node of it (a set-aside node on the local cluster), and rules that
select only that node's pools.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.reference import PrivateDriver
from dra_conformance.driver.taint_target import TaintTarget
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.builders import Builder
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.plugin.scenario_fixtures import shared_target

# NoExecute checks need one device for a pod that is evicted and one for a pod that tolerates the taint.
DEVICES_NEEDED = 2


@pytest.fixture
def taint_target(
    scenario_node: Callable[[str, tuple[str, ...]], str],
    private_driver: Callable[..., PrivateDriver],
    namespace: str,
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    driver_profile: DriverProfile,
    driver_under_test: DriverUnderTest,
) -> TaintTarget:
    """Devices of the driver under test on one node that only this test uses."""
    if driver_profile.declares(Capability.REFERENCE_FAULTS):
        driver = private_driver(devices=DEVICES_NEEDED)
        node, process = next(iter(driver.processes.items()))
        return TaintTarget(driver.name, node, (), Builder(namespace=namespace, driver=driver.name), process.control)
    per_node = driver_profile.devices.per_node
    if per_node < DEVICES_NEEDED:
        pytest.skip(
            f"not applicable: taint checks need {DEVICES_NEEDED} devices on one node; {driver_profile.source.name} "
            f"declares {per_node}"
        )
    target = shared_target(
        "device taints",
        needs_prepare=False,
        cluster=cluster,
        driver=driver_under_test,
        api_client=api_client,
        lease=scenario_node,
    )
    return TaintTarget(
        target.driver, target.node, target.tolerations, Builder(namespace=namespace, driver=target.driver)
    )
