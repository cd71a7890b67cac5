"""Where binding-condition checks run: devices with binding conditions that no other test's claim can take.

For the reference driver, a private instance with its `gpu-fabric` device profile and its attach controller, which
runs under a controller identity of its own made from the profile's `identity.controller` RBAC. For any other
driver, a leased node of it whose pools publish devices with binding conditions; its controller is whatever the
vendor installed, and the identity the profile names is the one that must write the conditions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client

from dra_conformance.driver.binding import BindingTarget, ControllerIdentity, named_writer
from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.scenarios.runner import ScenarioTarget

# The reference driver's device profile with binding conditions, and the devices one check needs of it.
FABRIC_PROFILE = "gpu-fabric"
FABRIC_DEVICES = 2


def _require_capability(profile: DriverProfile) -> None:
    if not profile.declares(Capability.BINDING_CONDITIONS):
        pytest.skip(f"not applicable: {Capability.BINDING_CONDITIONS} not declared")


@pytest.fixture
def binding_target(
    device_target: Callable[..., ScenarioTarget],
    tracker: ResourceTracker,
    namespace: str,
    api_client: client.ApiClient,
    driver_profile: DriverProfile,
    tmp_path: Path,
) -> Callable[..., BindingTarget]:
    """Starts (reference driver) or leases (any other) the devices with binding conditions of one check.

    `attach_delay`: how long the reference driver's controller takes per attach (ignored for other drivers).
    """

    def target(*, attach_delay: float) -> BindingTarget:
        _require_capability(driver_profile)
        if driver_profile.declares(Capability.REFERENCE_FAULTS):
            identity = ControllerIdentity(tracker, api_client, namespace)
            found = device_target(
                "binding conditions",
                devices=FABRIC_DEVICES,
                profile=FABRIC_PROFILE,
                args=(f"--controller-kubeconfig={identity.kubeconfig(tmp_path)}", f"--attach-delay={attach_delay:g}"),
            )
            # The controller acts only on allocations, which need the class the test creates next: granting its
            # RBAC now, once the driver's name is known, is in time.
            identity.grant(driver_profile, found.driver)
            build = Builder(namespace=namespace, driver=found.driver)
            return BindingTarget(found.driver, found.node, build, identity.username, control=found.control)
        found = device_target("binding conditions", devices=FABRIC_DEVICES)
        pools = node_pools(api_client, found.driver, found.node)
        binding = [
            name for pool in pools.values() for name, spec in pool.device_specs.items() if spec.get("bindingConditions")
        ]
        if not binding:
            pytest.fail(
                f"{driver_profile.source.name} declares {Capability.BINDING_CONDITIONS}, but no device of "
                f"{found.driver} on {found.node} has bindingConditions: {[p.describe() for p in pools.values()]}",
                pytrace=False,
            )
        return BindingTarget(
            found.driver,
            found.node,
            Builder(namespace=namespace, driver=found.driver),
            named_writer(driver_profile),
            tolerations=found.tolerations,
            all_devices=True,
        )

    return target
