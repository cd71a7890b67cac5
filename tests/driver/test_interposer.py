"""The kubelet-side interposer forwards to the driver untouched and injects delay, error and hang per claim.

Here the test plays the kubelet against the interposer's sockets, in front of a private reference driver; the
kubelet-mode suite shows the same with a real kubelet.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from kubernetes import client

from dra_conformance.driver.reference import PrivateDriver
from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim, allocate
from dra_conformance.kubelet.client import DriverClient
from dra_conformance.kubelet.interposer import InterposedFault, KubeletInterposer
from dra_conformance.timeouts import Timeouts
from dra_wire.kubelet_api import KubeletAPI

# An injected delay well above a prepare's ~10 ms here.
DELAY = 1.0
# The caller's deadline on a hung call: short, so the hang is seen to hold the call until then.
HUNG_CALL_DEADLINE = 1.5
# The interposer's side of that deadline ends within milliseconds of the caller's; seconds allow a busy machine.
HANG_RECORD_DEADLINE = 5.0


@pytest.fixture
def interposed(
    private_driver: Callable[..., PrivateDriver], kubelet_api: KubeletAPI
) -> Iterator[tuple[PrivateDriver, KubeletInterposer]]:
    driver = private_driver(devices=3)
    process = next(iter(driver.processes.values()))
    scratch = Path(tempfile.mkdtemp(prefix="dra-ip-"))
    interposer = KubeletInterposer(kubelet_api, process.endpoint, scratch)
    interposer.serve()
    yield driver, interposer
    interposer.stop()
    shutil.rmtree(scratch, ignore_errors=True)
    assert not interposer.registration_socket.exists(), "the interposer's registration socket outlived it"


def _claims(
    driver: PrivateDriver,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
    count: int,
) -> list[AllocatedClaim]:
    build = Builder(namespace=namespace, driver=driver.name)
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    node = next(iter(driver.processes))
    return [
        allocate(tracker, build, api_client, device_class, timeout=timeouts.pod_scheduled, node=node)
        for _ in range(count)
    ]


def test_interposer_registers_under_the_drivers_name_and_forwards_untouched(
    interposed: tuple[PrivateDriver, KubeletInterposer],
    kubelet_api: KubeletAPI,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
) -> None:
    driver, interposer = interposed
    [claim] = _claims(driver, tracker, api_client, namespace, timeouts, 1)
    with DriverClient(kubelet_api, interposer.registration_socket) as kubelet_side:
        info = kubelet_side.get_info()
        assert (info.name, info.endpoint) == (driver.name, str(interposer.dra_socket)), info
        kubelet_side.notify_registration_status(True)
        assert interposer.registered.is_set()
        answer = kubelet_side.prepare([claim.ref]).claims[claim.ref.uid]
        assert not answer.error and answer.devices, answer
        assert not kubelet_side.unprepare([claim.ref]).claims[claim.ref.uid].error
    assert [c[:2] for c in interposer.calls] == [
        ("NodePrepareResources", [claim.ref.uid]),
        ("NodeUnprepareResources", [claim.ref.uid]),
    ], interposer.calls


def test_interposer_injects_error_delay_and_hang_for_the_claims_named(
    interposed: tuple[PrivateDriver, KubeletInterposer],
    kubelet_api: KubeletAPI,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    namespace: str,
    timeouts: Timeouts,
) -> None:
    driver, interposer = interposed
    failing, other = _claims(driver, tracker, api_client, namespace, timeouts, 2)
    with DriverClient(kubelet_api, interposer.registration_socket) as kubelet_side:
        try:
            interposer.set_faults(
                [InterposedFault("NodePrepareResources", "error", claim=failing.ref.uid, message="boom")]
            )
            with pytest.raises(grpc.RpcError) as refused:
                kubelet_side.prepare([failing.ref])
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "boom" in str(refused.value.details())
            assert not kubelet_side.prepare([other.ref]).claims[other.ref.uid].error, (
                "a fault for one claim hit another"
            )

            interposer.set_faults([InterposedFault("NodePrepareResources", "delay", delay=DELAY)])
            slow = kubelet_side.prepare([failing.ref])
            assert slow.latency >= DELAY and not slow.claims[failing.ref.uid].error, slow

            interposer.set_faults([InterposedFault("NodeUnprepareResources", "hang")])
            with pytest.raises(grpc.RpcError) as hung:
                kubelet_side.unprepare([failing.ref], timeout=HUNG_CALL_DEADLINE)
            assert hung.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, hung.value
            # The interposer holds its copy of the call until the same deadline passes on its side: it records the
            # outcome a moment after the caller gave up.
            waits.until(
                lambda: list(interposer.calls),
                lambda calls: ("NodeUnprepareResources", [failing.ref.uid], "hung") in calls,
                timeout=HANG_RECORD_DEADLINE,
                what="the interposer's record of the unprepare it held until the caller's deadline",
            )
        finally:
            interposer.set_faults([])
            unprepared = {claim.ref.uid: kubelet_side.unprepare([claim.ref]).claims for claim in (failing, other)}
        assert not any(answer[uid].error for uid, answer in unprepared.items()), unprepared
