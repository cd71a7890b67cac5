"""The reference fake driver behaves as a correct DRA driver, and each of its faults is observable.

Every test runs its own driver instance (a name of its own), so faults never reach tests running in parallel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from kubernetes import client

from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.reference import PrivateDriver
from dra_conformance.errors import DriverError
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.pods import describe_pod
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.timeouts import Timeouts

# Injected prepare delay; well above the ~10 ms a prepare takes here, well below the 45 s kubelet budget.
SLOW_PREPARE_DELAY = 1.5
# Client deadline for calls into a hung driver: long enough to reach the driver, short enough to keep tests fast.
HUNG_CALL_DEADLINE = 2.0
# How long an unschedulable pod must stay unscheduled to count: two scheduler retry rounds.
STAYS_PENDING = 3.0
# One device more than a ResourceSlice may hold: the driver must split its pool over two slices.
MULTI_SLICE_DEVICES = 129


class Setup:
    """A private driver on one node, a DeviceClass for it, and helpers to allocate and read claims."""

    def __init__(
        self,
        driver: PrivateDriver,
        tracker: ResourceTracker,
        api_client: client.ApiClient,
        namespace: str,
        timeouts: Timeouts,
    ) -> None:
        self.driver, self.tracker, self.api_client, self.timeouts = driver, tracker, api_client, timeouts
        self.node = next(iter(driver.processes))
        self.process = driver.on(self.node)
        self.build = Builder(namespace=namespace, driver=driver.name)
        self.device_class = tracker.create(self.build.device_class())["metadata"]["name"]

    def allocate(self) -> AllocatedClaim:
        return allocate(
            self.tracker,
            self.build,
            self.api_client,
            self.device_class,
            timeout=self.timeouts.pod_scheduled,
            node=self.node,
        )

    def device_status(self, claim: AllocatedClaim) -> list[dict[str, Any]]:
        meta = claim.claim["metadata"]
        current = self.tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"])
        return device_statuses(current)


@pytest.fixture
def start_setup(
    private_driver: Callable[..., PrivateDriver],
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
) -> Callable[..., Setup]:
    return lambda **options: Setup(private_driver(**options), tracker, api_client, namespace, timeouts)


def test_slow_prepare_raises_measured_latency_above_the_delay(
    start_setup: Callable[..., Setup], kubelet: KubeletRole
) -> None:
    setup = start_setup()
    claim = setup.allocate()
    undo = setup.process.control.set_faults([{"mode": "slow-prepare", "delay": SLOW_PREPARE_DELAY}])
    result = kubelet.prepare(setup.process.endpoint, [claim.ref])
    undo()
    assert not result.claims[claim.ref.uid].error, result.claims
    assert result.latency >= SLOW_PREPARE_DELAY, f"client saw {result.latency:.3f}s with a {SLOW_PREPARE_DELAY}s delay"
    logged = [c for c in setup.process.control.calls() if c["method"] == "NodePrepareResources"]
    assert logged and logged[-1]["latency"] >= SLOW_PREPARE_DELAY, f"driver call log: {logged}"


def test_prepare_error_is_reported_for_that_claim_only(start_setup: Callable[..., Setup], kubelet: KubeletRole) -> None:
    setup = start_setup()
    failing, healthy = setup.allocate(), setup.allocate()
    setup.process.control.set_faults([{"mode": "prepare-error", "claim": failing.ref.uid, "message": "boom"}])
    answers = kubelet.prepare(setup.process.endpoint, [failing.ref, healthy.ref]).claims
    assert "boom" in answers[failing.ref.uid].error, answers[failing.ref.uid]
    assert not answers[healthy.ref.uid].error and answers[healthy.ref.uid].devices, answers[healthy.ref.uid]
    assert setup.device_status(failing) == [], "a failed prepare wrote status.devices"

    setup.process.control.set_faults([])  # recovery: the kubelet retries and the claim is prepared
    retried = kubelet.prepare(setup.process.endpoint, [failing.ref]).claims[failing.ref.uid]
    assert not retried.error and retried.devices, f"prepare after the fault was cleared: {retried}"


def test_status_write_failure_leaves_status_devices_empty_and_is_reported(
    start_setup: Callable[..., Setup], kubelet: KubeletRole
) -> None:
    setup = start_setup()
    claim = setup.allocate()
    setup.process.control.set_faults([{"mode": "status-write-failure"}])
    answer = kubelet.prepare(setup.process.endpoint, [claim.ref]).claims[claim.ref.uid]
    assert "status.devices" in answer.error, f"prepare answer: {answer}"
    assert setup.device_status(claim) == [], f"status.devices: {setup.device_status(claim)}"


def test_unavailable_device_is_not_allocated_and_reported_unhealthy(
    start_setup: Callable[..., Setup],
    driver_client: Callable[..., DriverClient],
    api_client: client.ApiClient,
    tracker: ResourceTracker,
) -> None:
    setup = start_setup(devices=1)
    setup.process.control.set_faults([{"mode": "unavailable", "device": "gpu-0"}])
    health = driver_client(setup.process.endpoint).first_health_report()
    assert health == {"gpu-0": "UNHEALTHY"}, f"health stream: {health}"

    claim = tracker.create(setup.build.claim(setup.device_class))
    pod = tracker.create(setup.build.pod(claim=claim["metadata"]["name"], node=setup.node))
    core = client.CoreV1Api(api_client)
    read = lambda: core.read_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"])  # noqa: E731
    with pytest.raises(Exception) as stayed:
        waits.until(
            read,
            lambda p: bool(p.spec.node_name),
            timeout=STAYS_PENDING,
            what="pod bound despite its only device being tainted",
            describe=describe_pod,
        )
    assert "timed out" in str(stayed.value), str(stayed.value)

    setup.process.control.set_faults([])  # the device comes back: the pod is scheduled
    bound = waits.until(
        read,
        lambda p: bool(p.spec.node_name),
        timeout=setup.timeouts.pod_scheduled,
        what="pod bound after the device became available",
        describe=describe_pod,
    )
    assert bound.spec.node_name == setup.node, describe_pod(bound)


def test_crashed_driver_is_detected(
    start_setup: Callable[..., Setup], driver_client: Callable[..., DriverClient], timeouts: Timeouts
) -> None:
    setup = start_setup()
    setup.process.control.crash()
    code = setup.process.wait_exit(timeouts.process_stop)
    assert code == 3, f"exit code {code}; log:\n{setup.process.log_tail()}"
    with pytest.raises(grpc.RpcError) as refused:
        driver_client(setup.process.endpoint).get_info()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
    with pytest.raises(DriverError):
        setup.process.control.healthz()


def test_hung_prepare_runs_into_the_callers_deadline(start_setup: Callable[..., Setup], kubelet: KubeletRole) -> None:
    setup = start_setup()
    claim = setup.allocate()
    setup.process.control.set_faults([{"mode": "hang-prepare"}])
    with pytest.raises(grpc.RpcError) as hung:
        kubelet.prepare(setup.process.endpoint, [claim.ref], timeout=HUNG_CALL_DEADLINE)
    assert hung.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, hung.value
    setup.process.control.set_faults([])
    answer = kubelet.prepare(setup.process.endpoint, [claim.ref]).claims[claim.ref.uid]
    assert not answer.error, f"prepare after the hang was cleared: {answer}"


def test_registration_failure_fails_get_info(
    start_setup: Callable[..., Setup], driver_client: Callable[..., DriverClient]
) -> None:
    setup = start_setup()
    setup.process.control.set_faults([{"mode": "registration-failure", "message": "not today"}])
    with pytest.raises(grpc.RpcError) as failed:
        driver_client(setup.process.endpoint).get_info()
    details = failed.value.details() or ""
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE and "not today" in details, failed.value
    setup.process.control.set_faults([])
    assert driver_client(setup.process.endpoint).get_info().name == setup.driver.name


def test_unprepare_error_is_reported_and_retry_succeeds(
    start_setup: Callable[..., Setup], kubelet: KubeletRole
) -> None:
    setup = start_setup()
    claim = setup.allocate()
    assert not kubelet.prepare(setup.process.endpoint, [claim.ref]).claims[claim.ref.uid].error
    setup.process.control.set_faults([{"mode": "unprepare-error"}])
    failed = kubelet.unprepare(setup.process.endpoint, [claim.ref]).claims[claim.ref.uid]
    assert "injected" in failed.error, failed
    assert setup.device_status(claim), "status.devices removed although unprepare failed"
    setup.process.control.set_faults([])
    assert not kubelet.unprepare(setup.process.endpoint, [claim.ref]).claims[claim.ref.uid].error
    assert setup.device_status(claim) == []


def _listed_slices(api_client: client.ApiClient, setup: Setup) -> list[str]:
    """Names of every slice of the setup's driver on its node, whatever their generation."""
    listed = client.ResourceV1Api(api_client).list_resource_slice(
        field_selector=f"spec.driver={setup.driver.name},spec.nodeName={setup.node}"
    )
    return sorted(item.metadata.name for item in listed.items)


def test_reduced_capacity_republishes_fewer_devices_with_a_new_generation(
    start_setup: Callable[..., Setup], api_client: client.ApiClient
) -> None:
    setup = start_setup(devices=MULTI_SLICE_DEVICES)
    before = setup.process.control.healthz()["generation"]
    pool = node_pools(api_client, setup.driver.name, setup.node)[setup.node]
    assert pool.complete and pool.slices == 2 and len(pool.devices) == MULTI_SLICE_DEVICES, pool.describe()
    assert pool.generation == before, pool.describe()

    setup.process.control.set_faults([{"mode": "reduced-capacity", "devices": 1}])
    pools = node_pools(api_client, setup.driver.name, setup.node)
    assert list(pools) == [setup.node], pools
    pool = pools[setup.node]
    assert pool.devices == ("gpu-0",), f"published devices: {pool.devices}"
    assert pool.generation == before + 1 and pool.complete, pool.describe()
    assert len(_listed_slices(api_client, setup)) == 1, f"slices no longer needed: {_listed_slices(api_client, setup)}"


def test_tainted_device_in_a_large_pool_is_published_in_slices_the_api_accepts(
    start_setup: Callable[..., Setup], api_client: client.ApiClient
) -> None:
    # The API server allows 128 devices per slice, but only 64 once one of them has taints (the unavailable fault).
    setup = start_setup(devices=MULTI_SLICE_DEVICES)
    before = setup.process.control.healthz()["generation"]
    setup.process.control.set_faults([{"mode": "unavailable", "device": "gpu-0"}])
    pool = node_pools(api_client, setup.driver.name, setup.node)[setup.node]
    assert pool.generation == before + 1 and pool.complete and pool.slices == 3, pool.describe()
    assert len(pool.devices) == MULTI_SLICE_DEVICES, pool.describe()
    setup.process.control.set_faults([])
    pool = node_pools(api_client, setup.driver.name, setup.node)[setup.node]
    assert pool.generation == before + 2 and pool.complete and pool.slices == 2, pool.describe()
    assert len(_listed_slices(api_client, setup)) == 2, f"slices no longer needed: {_listed_slices(api_client, setup)}"


def test_nic_driver_reports_network_data(start_setup: Callable[..., Setup], kubelet: KubeletRole) -> None:
    setup = start_setup(profile="nic")
    claim = setup.allocate()
    assert not kubelet.prepare(setup.process.endpoint, [claim.ref]).claims[claim.ref.uid].error
    (entry,) = setup.device_status(claim)
    network = entry.get("networkData") or {}
    assert network.get("interfaceName", "").startswith("fake"), entry
    assert all("/" in ip for ip in network.get("ips", [])) and network.get("ips"), f"ips must be CIDRs: {network}"
    assert network.get("hardwareAddress", "").count(":") == 5, entry


def test_invalid_fault_is_refused_in_one_line_and_changes_nothing(start_setup: Callable[..., Setup]) -> None:
    setup = start_setup()
    setup.process.control.set_faults([{"mode": "slow-prepare", "delay": 1}])
    with pytest.raises(DriverError) as refused:
        setup.process.control.set_faults([{"mode": "melt"}])
    assert "mode: 'melt' is not one of" in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert setup.process.control.faults() == [{"mode": "slow-prepare", "delay": 1.0, "message": "injected fault"}]
