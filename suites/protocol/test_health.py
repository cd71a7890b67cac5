"""The health stream (DRAResourceHealth/NodeWatchResources), where the profile declares it.

The kubelet watches the stream, maps each report to the devices it prepared by (pool, device), and reports a
device as Unknown when its health is not re-sent within health_check_timeout (default 30 s).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import allure
import grpc
import pytest
from kubernetes import client

from dra_conformance.driver import health_hook
from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.profile import Capability
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import UsageError
from dra_conformance.kubelet.client import HEALTH_SERVICES, DriverClient
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations

pytestmark = pytest.mark.usefixtures("driver_sockets")

# The kubelet's default health_check_timeout (DefaultHealthTimeout): a device not re-sent within it becomes Unknown.
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
    where = f"node {node}"
    plugin = driver_client(endpoint)
    # As the kubelet does: the health service is the first one it knows that GetInfo advertises.
    service = plugin.health_service()
    if service is None:
        versions = list(plugin.get_info().supported_versions)
        obligations.fail("protocol.health-service-advertised", f"GetInfo supported_versions {versions}", where)
    obligations.check(
        "protocol.health-service-v1", service == HEALTH_SERVICES["v1"], f"the kubelet picks {service}", where
    )
    try:
        reports = plugin.health_reports(2, timeout=TWO_REPORTS_DEADLINE, service=service)
    except grpc.RpcError as error:
        observed = f"{error.code().name}: {error.details()}"
        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            # The stream answered, but not twice within two windows: health was not re-sent in time.
            obligations.fail("protocol.health-resent-within-timeout", f"{observed} ({TWO_REPORTS_DEADLINE}s)", where)
        # Declared and not delivered fails (UNIMPLEMENTED included: then the profile should not declare it).
        obligations.fail("protocol.declared-health-stream-answers", observed, where)
    # The kubelet matches health to prepared devices by (pool, device), so both names must be the published ones.
    published = {
        (name, device)
        for name, pool in node_pools(api_client, driver_under_test.name, node).items()
        for device in pool.devices
    }
    for at, devices in reports:
        observed = f"report at {at:.1f}s: reported {sorted(devices)}, published {sorted(published)}"
        obligations.check("protocol.health-reports-name-published-devices", set(devices) <= published, observed, where)
        obligations.check("protocol.health-report-complete", set(devices) == published, observed, where)
    if len(reports) < 2:
        obligations.fail(
            "protocol.health-resent-within-timeout", f"the stream ended after {len(reports)} report(s)", where
        )
    gap = reports[1][0] - reports[0][0]
    obligations.check(
        "protocol.health-resent-within-timeout",
        gap <= HEALTH_CHECK_TIMEOUT,
        f"{gap:.1f}s between the first two reports (window {HEALTH_CHECK_TIMEOUT:g}s)",
        where,
    )


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
    profile = driver_under_test.profile
    if not profile.declares(Capability.HEALTH_STREAM):
        pytest.skip(f"not applicable: {profile.source} does not declare healthStream")
    node = disruption.node
    with contextlib.ExitStack() as faults:
        if profile.fault_switches:
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
    obligations.check(
        "protocol.tainted-device-not-reported-healthy",
        all(health.get(device) != "HEALTHY" for device in failing),
        f"tainted {failing}; health stream {health}",
        f"node {node}",
    )


# A first report comes as the stream opens; one health_check_timeout window, and a little more for start-up.
FIRST_REPORT_DEADLINE = HEALTH_CHECK_TIMEOUT + 5.0


@pytest.mark.capability("healthStream")
def test_every_advertised_health_version_streams_the_same_devices(
    driver_under_test: DriverUnderTest,
    driver_client: Callable[..., DriverClient],
    obligations: Obligations,
) -> None:
    if not driver_under_test.profile.declares(Capability.HEALTH_STREAM):
        pytest.skip(f"not applicable: {driver_under_test.profile.source} does not declare healthStream")
    node, endpoint = next(iter(driver_under_test.endpoints.items()))
    plugin = driver_client(endpoint)
    advertised = list(plugin.get_info().supported_versions)
    services = [service for service in HEALTH_SERVICES.values() if service in advertised]
    if len(services) < 2:
        pytest.skip(
            f"not applicable: GetInfo on {node} advertises {services or 'no'} DRAResourceHealth version(s) of "
            f"{list(HEALTH_SERVICES.values())}; the one the kubelet reads is judged by the health stream check"
        )
    where = f"node {node}, GetInfo supported_versions {advertised}"
    answers: dict[str, set[tuple[str, str]] | str] = {}
    for service in services:
        try:
            first = plugin.health_reports(1, timeout=FIRST_REPORT_DEADLINE, service=service)
        except grpc.RpcError as error:
            answers[service] = f"{error.code().name}: {error.details()}"
            continue
        answers[service] = (
            set(first[0][1]) if first else f"the stream ended without a report ({FIRST_REPORT_DEADLINE:g}s)"
        )
    shown = {service: sorted(seen) if isinstance(seen, set) else seen for service, seen in answers.items()}
    device_sets = [seen for seen in answers.values() if isinstance(seen, set)]
    obligations.check(
        "protocol.every-advertised-health-version-answers",
        len(device_sets) == len(services) and all(seen == device_sets[0] for seen in device_sets),
        f"first report per advertised version (pool, device): {shown}",
        where,
    )


# After a hook, the driver reports the device's new health within the kubelet's window (it re-sends at least that
# often), and a little more for the stream's start.
HOOKED_HEALTH_DEADLINE = HEALTH_CHECK_TIMEOUT + 5.0


def _device_health(report: dict[tuple[str, str], tuple[str, str]], device: tuple[str, str]) -> tuple[str, str]:
    return report.get(device, ("absent", ""))


@pytest.mark.capability("healthStream")
def test_a_device_made_unhealthy_through_the_profile_hook_is_reported_unhealthy_with_a_message(
    disruption: Disruption,
    driver_under_test: DriverUnderTest,
    driver_client: Callable[..., DriverClient],
    api_client: client.ApiClient,
    cluster: ClusterInfo,
    obligations: Obligations,
) -> None:
    """The profile's `health` hook fails one device on a node only this check uses; the stream must say so, and why.

    Issue 44, item 6: a driver that can make a device unhealthy (a command, or a file to write) reports it UNHEALTHY
    on its health stream within the kubelet's window, with a message (the kubelet copies it into the pod's
    allocatedResourcesStatus), and HEALTHY again once the hook is undone.
    """
    profile = driver_under_test.profile
    if not profile.declares(Capability.HEALTH_STREAM):
        pytest.skip(f"not applicable: {profile.source} does not declare healthStream")
    if profile.health is None:
        pytest.skip(
            f"not applicable: {profile.source} declares no way to make a device unhealthy (health.makeUnhealthy)"
        )
    hooks, node = profile.health, disruption.node
    published = sorted(
        (name, device) for name, pool in node_pools(api_client, profile.driver, node).items() for device in pool.devices
    )
    if not published:
        pytest.skip(f"not applicable: {profile.driver} publishes no device on {node} (the slice checks judge that)")
    target = published[-1]
    pool, device = target
    values = health_hook.hook_values(profile, disruption.endpoint, device, pool, cluster.details)
    where = f"node {node}, device {device} of pool {pool}"
    plugin = driver_client(disruption.endpoint)

    def unhealthy(report: dict[tuple[str, str], tuple[str, str]]) -> bool:
        return _device_health(report, target)[0] == "UNHEALTHY"

    def healthy(report: dict[tuple[str, str], tuple[str, str]]) -> bool:
        return _device_health(report, target)[0] == "HEALTHY"

    with allure.step(f"make {device} on {node} unhealthy: {hooks.make_unhealthy.describe()}"):
        try:
            problem = health_hook.run(hooks.make_unhealthy, values)
        except UsageError as error:
            pytest.skip(f"not applicable: the hook cannot run here: {error}")
    undone = False
    try:
        if problem is not None:
            obligations.fail(
                "protocol.hooked-device-reported-unhealthy", f"health.makeUnhealthy failed: {problem}", where
            )
        reports = plugin.watch_health(unhealthy, timeout=HOOKED_HEALTH_DEADLINE)
        health, message = _device_health(reports[-1][1], target) if reports else ("no report", "")
        seen = f"after health.makeUnhealthy, {len(reports)} report(s) within {HOOKED_HEALTH_DEADLINE:g}s: {health}"
        obligations.check("protocol.hooked-device-reported-unhealthy", health == "UNHEALTHY", seen, where)
        obligations.check(
            "protocol.unhealthy-report-carries-message",
            bool(message.strip()),
            f"UNHEALTHY with message {message!r}",
            where,
        )
        with allure.step(f"make {device} on {node} healthy again: {hooks.make_healthy.describe()}"):
            undone = True
            problem = health_hook.run(hooks.make_healthy, values)
        reports = plugin.watch_health(healthy, timeout=HOOKED_HEALTH_DEADLINE)
        health, message = _device_health(reports[-1][1], target) if reports else ("no report", "")
        obligations.check(
            "protocol.hooked-device-healthy-again",
            problem is None and health == "HEALTHY",
            f"health.makeHealthy {'failed: ' + problem if problem else 'ran'}; then {len(reports)} report(s) within "
            f"{HOOKED_HEALTH_DEADLINE:g}s: {health} ({message!r})",
            where,
        )
    finally:
        if not undone:
            with contextlib.suppress(UsageError):
                health_hook.run(hooks.make_healthy, values)  # the node goes back to the next check as it was
