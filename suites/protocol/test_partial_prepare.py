"""Two drivers in one pod, one failing: the claim of the driver that succeeded is left with nothing once the pod ends.

The kubelet prepares a pod's claims driver by driver and aborts at the first failure; it marks the pod's claims
prepared only once every driver succeeded, so a claim another driver's failure left unmarked is prepared again on
each retry, and unprepared once when the pod ends (k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/dra/manager.go). No
rollback follows the failure (k/k#137819; the one proposed in k/k#137945 was not taken). The other driver is a private
instance of the reference driver whose prepares fail (its prepare-error fault): whatever the driver under test is,
its claim sits in a pod that never starts. The test plays the kubelet: a try and a retry, then the pod's end in the
kubelet's order (its claims unprepared, then its deletion completed); after that the driver under test must hold no
CDI spec naming its claim and no status.devices entry of its own, and a repeated unprepare must succeed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import allure
import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from dra_conformance.driver.real_node import CdiSpecFiles
from dra_conformance.driver.reference import PrivateDrivers, reference_program
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.errors import DriverError, WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder, ClaimUse
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.leaks import LeakError
from dra_conformance.kube.pods import describe_pod
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.cluster import BackendCapability, ClusterInfo
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

from .node_claims import claims_that_fit

pytestmark = pytest.mark.usefixtures("driver_sockets")

# The failing driver: the reference driver's nic device profile (device names no GPU of a driver under test shares),
# one device for the pod's second claim.
FAILING_PROFILE = "nic"
FAILING_DEVICES = 1
# The kubelet's tries at the pod before it is deleted: the first and one retry, each preparing the driver's claim.
TRIES = 2


@dataclass(frozen=True)
class FailingDriver:
    """Another driver on the node of the driver under test, whose every prepare fails, and a DeviceClass of it."""

    name: str
    device_class: str
    endpoint: DriverEndpoint


@pytest.fixture
def failing_driver(
    held_nodes: None,
    cluster: ClusterInfo,
    dynamic_client: DynamicClient,
    api_client: client.ApiClient,
    tracker: ResourceTracker,
    build: Builder,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
) -> Iterator[FailingDriver]:
    """A private reference driver instance on the first node of the driver under test, failing every prepare.

    Where the backend runs private reference driver instances (the local backend, whatever the driver under test);
    not applicable elsewhere. Ask for it before `kubelet`, so that the kubelet's leftover unprepares run while it is
    still there.
    """
    if BackendCapability.REFERENCE_DRIVER not in cluster.capabilities:
        pytest.skip(
            f"not applicable: the failing second driver is a private reference driver instance, which backend "
            f"{cluster.backend} cannot run"
        )
    node = next(iter(driver_under_test.endpoints))
    drivers = PrivateDrivers(
        dynamic_client,
        api_client,
        tracker,
        build.namespace,
        (node,),
        timeouts,
        program=reference_program(cluster.details),
    )
    try:
        started = drivers.start(profile=FAILING_PROFILE, devices=FAILING_DEVICES)
        process = started.on(node)
        process.control.set_faults([{"mode": "prepare-error", "message": "the second driver's device failed"}])
        selector = {"cel": {"expression": f'device.driver == "{started.name}"'}}
        device_class = tracker.create(
            {
                "apiVersion": RESOURCE_API,
                "kind": "DeviceClass",
                "metadata": {"name": build.cluster_name("failing-class")},
                "spec": {"selectors": [selector]},
            }
        )
        yield FailingDriver(started.name, str(device_class["metadata"]["name"]), process.endpoint)
    finally:
        leaks = drivers.cleanup()
    if leaks:
        raise LeakError(f"the failing second driver left behind: {leaks}")


def _pod_with_two_drivers_claims(
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    node: str,
    device_class: str,
    other_class: str,
    timeout: float,
) -> tuple[AllocatedClaim, AllocatedClaim]:
    """A claim of `device_class` and one of `other_class`, in one pod pinned to `node`: both, once the pod is bound."""
    claims = [
        tracker.create(build.claim(device_class)),
        tracker.create(build.claim(other_class)),
    ]
    uses = [
        ClaimUse(name, claim=claim["metadata"]["name"]) for name, claim in zip(("mine", "theirs"), claims, strict=True)
    ]
    pod = tracker.create(build.held(build.pod_with(uses, node=node)))
    core = client.CoreV1Api(api_client)
    waits.until(
        lambda: core.read_namespaced_pod(pod["metadata"]["name"], build.namespace),
        lambda p: bool(p.spec.node_name),
        timeout=timeout,
        what=f"pod {pod['metadata']['name']} with claims of two drivers bound to {node}",
        describe=describe_pod,
    )
    allocated = [tracker.get(RESOURCE_API, "ResourceClaim", c["metadata"]["name"], build.namespace) for c in claims]
    return AllocatedClaim(allocated[0], pod, node), AllocatedClaim(allocated[1], pod, node)


def _cdi_specs_naming(endpoint: DriverEndpoint, uid: str) -> list[str]:
    """The CDI spec files in the endpoint's CDI dir (where this machine reads it) that name the claim UID."""
    if endpoint.cdi_dir is None:
        return []
    return sorted(PurePosixPath(path).name for path in CdiSpecFiles((PurePosixPath(endpoint.cdi_dir),)).naming(uid))


def test_a_claim_whose_pod_failed_on_another_drivers_prepare_is_left_with_nothing_once_the_pod_ends(
    failing_driver: FailingDriver,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
    driver_under_test: DriverUnderTest,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    claims_that_fit(driver_under_test, 1, "a claim beside the other driver's")
    driver = driver_under_test.name
    node = failing_driver.endpoint.node
    endpoint = driver_under_test.endpoints[node]
    mine, theirs = _pod_with_two_drivers_claims(
        tracker, build, api_client, node, device_class, failing_driver.device_class, timeouts.pod_scheduled
    )
    where = f"claim {mine.ref.name} of {driver} on {node}, in pod {mine.pod['metadata']['name']} with claim "
    where += f"{theirs.ref.name} of {failing_driver.name}"
    meta = mine.claim["metadata"]

    def entries() -> list[dict[str, Any]]:
        claim = tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"])
        return [e for e in device_statuses(claim) if e["driver"] == driver]

    for attempt in range(1, TRIES + 1):
        call = "prepare" if attempt == 1 else f"prepare on the kubelet's retry {attempt - 1}"
        with allure.step(f"try {attempt}: {driver}'s claim prepared, then {failing_driver.name}'s fails"):
            check_prepare_answer(obligations, mine, driver, kubelet.prepare_outcome(endpoint, [mine.ref]), call)
            failed = kubelet.prepare_outcome(failing_driver.endpoint, [theirs.ref])
            if failed.prepared(theirs.ref):
                raise DriverError(f"{failing_driver.name}: its prepare-error fault did not fail {theirs.ref.name}")
    prepared_specs = _cdi_specs_naming(endpoint, mine.ref.uid)
    with allure.step("the pod ends: the kubelet unprepares its claims, then its deletion completes"):
        check_unprepare(obligations, kubelet, endpoint, mine.ref, "protocol.unprepare-succeeds", "unprepare at the end")
        kubelet.unprepare(failing_driver.endpoint, [theirs.ref])
        # The entries may go after the unprepare returned; judged while the claim is still allocated, before the
        # pod's deletion lets the claim controller deallocate it.
        try:
            left_entries = waits.until(
                entries,
                lambda now: not now,
                timeout=timeouts.status_written,
                what="status.devices emptied",
                describe=str,
            )
        except WaitTimeout:
            left_entries = entries()
        tracker.delete(mine.pod)
    left_specs = _cdi_specs_naming(endpoint, mine.ref.uid)
    check_unprepare(
        obligations,
        kubelet,
        endpoint,
        mine.ref,
        "protocol.partial-prepare-leaves-no-state",
        "repeated unprepare after the pod ended",
    )
    left = [f"CDI spec {name}" for name in left_specs]
    left += [f"status entry {e['pool']}/{e['device']}" for e in left_entries]
    read = "" if endpoint.cdi_dir is not None else " (its CDI dir is not readable from this machine)"
    obligations.check(
        "protocol.partial-prepare-leaves-no-state",
        not left,
        f"after {TRIES} prepares (CDI specs naming the claim after them: {prepared_specs}) and the unprepare at the "
        f"pod's end, the driver still holds: {left}{read}",
        where,
    )
