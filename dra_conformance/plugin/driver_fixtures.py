"""Fixtures for checks that talk to DRA drivers.

The driver under test, kubelet-side clients (and the `kubelet` role that prepares claims the way a kubelet
would), and private instances of the reference driver for tests that switch faults on, so that parallel tests
never see each other's faults.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance.backends.base import BackendCapability, ClusterInfo
from dra_conformance.driver.endpoint import DriverEndpoint, DriverUnderTest
from dra_conformance.driver.reference import PrivateDriver, PrivateDrivers
from dra_conformance.errors import BackendError
from dra_conformance.kube.leaks import LeakError
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.kubelet.latency import LatencyLog
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.report.records import RunRecords
from dra_conformance.timeouts import Timeouts
from dra_wire.kubelet_api import BindingsError, KubeletAPI, load


@pytest.fixture(scope="session")
def kubelet_api() -> KubeletAPI:
    """Bindings of the kubelet plugin APIs (generated from the pinned .proto files on first use)."""
    try:
        return load()
    except BindingsError as error:
        raise BackendError(f"kubelet plugin API bindings: {error}") from None


@pytest.fixture(scope="session")
def driver_under_test(cluster: ClusterInfo) -> DriverUnderTest:
    """The driver whose sockets this machine can reach; skips when there is none (e.g. a remote cluster)."""
    if not cluster.drivers:
        pytest.skip(f"backend {cluster.backend} exposes no kubelet-plugin sockets on this machine")
    name = cluster.drivers[0].driver
    return DriverUnderTest(name, {e.node: e for e in cluster.drivers if e.driver == name})


@pytest.fixture(scope="session")
def latency_log(run_records: RunRecords) -> LatencyLog:
    """Where this worker records kubelet-plugin call latencies."""
    return LatencyLog(run_records)


@pytest.fixture
def driver_client(kubelet_api: KubeletAPI) -> Iterator[Callable[[DriverEndpoint], DriverClient]]:
    """Opens kubelet-side clients to driver endpoints; all are closed after the test."""
    opened: list[DriverClient] = []

    def open_client(endpoint: DriverEndpoint) -> DriverClient:
        opened.append(DriverClient(kubelet_api, endpoint.registration_socket))
        return opened[-1]

    yield open_client
    for driver in opened:
        driver.close()


@pytest.fixture
def kubelet(
    driver_client: Callable[[DriverEndpoint], DriverClient], latency_log: LatencyLog, api_client: client.ApiClient
) -> Iterator[KubeletRole]:
    """The kubelet's role in control-plane checks on fake nodes (see `KubeletRole`)."""
    role = KubeletRole(driver_client, latency_log, api_client)
    yield role
    failures = role.unprepare_leftovers()
    assert not failures, f"claims left prepared after the test could not be unprepared: {failures}"


@pytest.fixture
def private_driver(
    dynamic_client: DynamicClient,
    cluster: ClusterInfo,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
) -> Iterator[Callable[..., PrivateDriver]]:
    """Starts reference driver instances only this test uses (see `PrivateDrivers`); local backend only."""
    if BackendCapability.REFERENCE_DRIVER not in cluster.capabilities:
        pytest.skip(f"backend {cluster.backend} cannot run private fake driver instances")
    drivers = PrivateDrivers(dynamic_client, api_client, tracker, namespace, cluster.nodes[:1], timeouts)
    yield drivers.start
    leaks = drivers.cleanup()
    if leaks:
        raise LeakError(f"leaked by the test's driver after cleanup: {leaks}")
