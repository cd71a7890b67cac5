"""The health stream (DRAResourceHealth/NodeWatchResources), where the profile declares it.

The kubelet watches the stream, maps each report to the devices it prepared by (pool, device), and reports a
device as Unknown when its health is not re-sent within health_check_timeout (default 30 s).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import grpc
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.endpoint import DriverUnderTest
from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import Capability
from dra_conformance.driver.reference import FakeDriverControl, PrivateDriver
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.report.findings import Obligations

pytestmark = pytest.mark.usefixtures("driver_sockets")

HEALTH_PROTO = "k8s.io/kubelet@v0.37.2 pkg/apis/dra-health/v1/api.proto"
# The kubelet's default health_check_timeout: a device not re-sent within it becomes Unknown (api.proto:57-63).
HEALTH_CHECK_TIMEOUT = 30.0
# Two reports must arrive within two windows; a little more covers stream start-up.
TWO_REPORTS_DEADLINE = 2 * HEALTH_CHECK_TIMEOUT + 5.0


@pytest.mark.capability("healthStream")
def test_declared_health_stream_reports_published_devices_within_the_kubelet_window(
    driver_under_test: DriverUnderTest,
    driver_client: Callable[..., DriverClient],
    api_client: client.ApiClient,
    obligations: Obligations,
) -> None:
    if not driver_under_test.profile.declares(Capability.HEALTH_STREAM):
        pytest.skip(f"not applicable: {driver_under_test.profile.source} does not declare healthStream")
    node, endpoint = next(iter(driver_under_test.endpoints.items()))
    try:
        reports = driver_client(endpoint).health_reports(2, timeout=TWO_REPORTS_DEADLINE)
    except grpc.RpcError as error:
        # Declared and not delivered fails (UNIMPLEMENTED included: then the profile should not declare it).
        obligations.contract(
            False, "the declared health stream answers", f"{error.code().name}: {error.details()}", HEALTH_PROTO
        )
        return
    published = {
        device for pool in node_pools(api_client, driver_under_test.name, node).values() for device in pool.devices
    }
    for at, devices in reports:
        obligations.contract(
            set(devices) <= published,
            f"the report at {at:.1f}s names only devices the driver publishes for {node}",
            f"reported {sorted(devices)}, published {sorted(published)}",
            f"{HEALTH_PROTO}:57-74",
        )
        obligations.defensive(
            set(devices) == published,
            f"the report at {at:.1f}s lists every published device",
            f"reported {sorted(devices)}, published {sorted(published)}",
            f"{HEALTH_PROTO}:71-74 (should)",
        )
    gap = reports[1][0] - reports[0][0]
    obligations.contract(
        gap <= HEALTH_CHECK_TIMEOUT,
        "health is re-sent within the kubelet's health_check_timeout",
        f"{gap:.1f}s between the first two reports",
        f"{HEALTH_PROTO}:57-63",
    )


def test_reference_driver_reports_an_unavailable_device_unhealthy(
    private_driver: Callable[..., PrivateDriver], driver_client: Callable[..., DriverClient]
) -> None:
    driver = private_driver(devices=2)
    process = next(iter(driver.processes.values()))
    process.control.set_faults([{"mode": "unavailable", "device": "gpu-1"}])
    health = driver_client(process.endpoint).first_health_report()
    assert health == {"gpu-0": "HEALTHY", "gpu-1": "UNHEALTHY"}, f"health stream with gpu-1 unavailable: {health}"


# Taint effects with which a driver says in its own slice that a device must not get new (or any) pods.
FAILING_EFFECTS = {"NoSchedule", "NoExecute"}


@pytest.mark.capability("healthStream")
def test_health_stream_does_not_report_healthy_a_device_its_own_slice_taints(
    disruption: Disruption,
    driver_under_test: DriverUnderTest,
    driver_client: Callable[..., DriverClient],
    api_client: client.ApiClient,
    obligations: Obligations,
) -> None:
    """Defensive cross-check of the driver's two statements about one device (no contract links them)."""
    profile = driver_under_test.profile
    if not profile.declares(Capability.HEALTH_STREAM):
        pytest.skip(f"not applicable: {profile.source} does not declare healthStream")
    node = disruption.node
    with contextlib.ExitStack() as faults:
        if profile.declares(Capability.REFERENCE_FAULTS):
            # The reference driver fails a device on request: tainted NoSchedule in its slice, and in its health.
            published = sorted(d for p in node_pools(api_client, profile.driver, node).values() for d in p.devices)
            control = FakeDriverControl(disruption.endpoint)
            faults.callback(control.set_faults([*control.faults(), {"mode": "unavailable", "device": published[-1]}]))
        pools = node_pools(api_client, profile.driver, node)
        health = driver_client(disruption.endpoint).first_health_report()
    failing = sorted(
        device
        for pool in pools.values()
        for device, effects in pool.taint_effects.items()
        if FAILING_EFFECTS & set(effects)
    )
    if not failing:
        pytest.skip(f"not applicable: the driver taints no device of {node} in its slices; nothing to compare")
    obligations.defensive(
        all(health.get(device) != "HEALTHY" for device in failing),
        "a device the driver taints as failing in its own slice is not reported HEALTHY",
        f"tainted {failing}; health stream {health}",
        f"{HEALTH_PROTO}:57-63",
    )
