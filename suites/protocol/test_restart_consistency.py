"""What a driver remembers of concurrent prepares and unprepares once it is restarted.

A driver keeps a record of its prepared claims (a checkpoint file) so that their unprepare works after a restart.
Written without a lock, concurrent prepares and unprepares overwrite each other's changes on disk: the running process
is right, and only the restart shows it, when it has forgotten claims it prepared and their unprepare leaves their
node-local work behind (issue 43's held-out class, certified). Claims are unprepared and prepared at once on a leased
node, the driver is killed and started again, and everything still prepared is unprepared: nothing that names a claim
may be left.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from pathlib import Path
from typing import Any

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.builders import RESOURCE_API, Builder
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.obligations import check_prepare_answer, check_unprepare
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

pytestmark = pytest.mark.usefixtures("driver_sockets")

# Claims on each side of the burst: as many unprepared as prepared at once (a lost write is likelier the more
# changes overlap), one device each; with the control claim they need 2 * EACH_SIDE + 1 devices on the leased node.
EACH_SIDE = 3


def _left_behind(driver: str, cdi_dir: Path | None, tracker: ResourceTracker, claim: AllocatedClaim) -> list[str]:
    """What still names `claim` on the node and in the API: CDI spec files with its UID, the driver's status entries."""
    left = []
    if cdi_dir is not None and cdi_dir.is_dir():
        for path in sorted(cdi_dir.iterdir()):
            if path.is_file() and claim.ref.uid in path.read_text(errors="replace"):
                left.append(f"CDI spec {path.name}")
    meta = claim.claim["metadata"]
    entries = device_statuses(tracker.get(RESOURCE_API, "ResourceClaim", meta["name"], meta["namespace"]))
    left += [f"status entry {e['pool']}/{e['device']}" for e in entries if e["driver"] == driver]
    return left


def test_claims_prepared_and_unprepared_concurrently_are_known_as_such_after_a_restart(
    disruption: Disruption,
    driver_under_test: DriverUnderTest,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    device_class: str,
    timeouts: Timeouts,
    kubelet: KubeletRole,
    obligations: Obligations,
) -> None:
    per_node = driver_under_test.profile.devices.per_node
    if per_node < 2 * EACH_SIDE + 1:
        pytest.skip(f"not applicable: {per_node} device(s) per node leave no room for {2 * EACH_SIDE + 1} claims")
    driver, endpoint, node = driver_under_test.name, disruption.endpoint, disruption.node
    claims = [
        disruption.allocate(tracker, build, api_client, device_class, timeouts.pod_scheduled)
        for _ in range(2 * EACH_SIDE + 1)
    ]
    control, unprepared, prepared = claims[0], claims[1 : EACH_SIDE + 1], claims[EACH_SIDE + 1 :]

    def prepare(claim: AllocatedClaim, call: str) -> None:
        check_prepare_answer(obligations, claim, driver, kubelet.prepare_outcome(endpoint, [claim.ref]), call)

    for claim in [control, *unprepared]:
        prepare(claim, "prepare before the burst")
    # What a claim's prepare leaves on the node and in the API, if anything (judged for the control claim).
    if not _left_behind(driver, endpoint.cdi_dir, tracker, control):
        pytest.skip(
            f"not applicable: nothing this machine reads names a prepared claim of {driver} on {node} (no CDI spec "
            "naming its UID in a CDI dir read here, no status.devices entry): what it remembers is not observable"
        )
    burst: list[Callable[[], Any]] = [
        *(
            lambda claim=claim: check_unprepare(
                obligations, kubelet, endpoint, claim.ref, "protocol.unprepare-succeeds", "unprepare in the burst"
            )
            for claim in unprepared
        ),
        *(lambda claim=claim: prepare(claim, "prepare in the burst") for claim in prepared),
    ]
    with allure.step(f"unprepare {len(unprepared)} claims and prepare {len(prepared)} others at once on {node}"):
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(burst)) as pool:
            for done in [pool.submit(call) for call in burst]:
                done.result()  # an obligation the call broke is raised here
    with allure.step(f"SIGKILL the driver on {node}, then start it again"):
        disruption.kill()
        disruption.start()  # waits until it registered again with a complete pool
    for claim in [control, *prepared]:
        check_unprepare(
            obligations,
            kubelet,
            endpoint,
            claim.ref,
            "protocol.unprepare-after-restart-succeeds",
            "unprepare after the restart",
        )
    if _left_behind(driver, endpoint.cdi_dir, tracker, control):
        pytest.skip(
            f"not applicable: {driver} leaves the work of a claim prepared before a restart when it is unprepared "
            f"after it, also with no concurrent change ({_left_behind(driver, endpoint.cdi_dir, tracker, control)}): "
            "protocol.unprepare-after-restart-removes-cdi-specs judges that"
        )
    left = {
        f"{claim.ref.name} ({side})": found
        for side, group in (("prepared in the burst", prepared), ("unprepared in the burst", unprepared))
        for claim in group
        if (found := _left_behind(driver, endpoint.cdi_dir, tracker, claim))
    }
    obligations.check(
        "protocol.restart-after-concurrent-changes-knows-prepared-claims",
        not left,
        f"after the restart, with every claim unprepared: {left}",
        f"{len(claims)} claims on {node}",
    )
