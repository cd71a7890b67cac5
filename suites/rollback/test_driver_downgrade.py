"""Driver vN -> vN+1 -> vN with claims in flight: pools stay current, prepared claims stay known, nothing doubles.

Runs for any driver whose profile names its previous build (`run.versions.previous`) on a backend that runs the
driver's processes (the local backend), on a set-aside node leased for it. The kubelet's part (prepare, unprepare)
is played by the test, as in the protocol suite.
"""

from __future__ import annotations

import time

import allure
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.profile import DriverProfile
from dra_conformance.errors import BackendError, UsageError
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.report.records import RunRecords
from dra_conformance.rollback.driver_versions import (
    PREVIOUS,
    SWITCHES,
    BuildStep,
    DowngradeRecord,
    check_pool_after_switch,
    elapsed,
)
from dra_conformance.timeouts import Timeouts

RECORD_KIND = "driver-downgrade"


def _devices(claim: AllocatedClaim) -> set[tuple[str, str]]:
    return {(r["pool"], r["device"]) for r in claim.results}


def test_driver_upgraded_and_downgraded_with_claims_in_flight_keeps_pools_current_and_claims_known(
    disruption: Disruption,
    kubelet: KubeletRole,
    tracker: ResourceTracker,
    build: Builder,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    driver_profile: DriverProfile,
    request: pytest.FixtureRequest,
    run_records: RunRecords,
) -> None:
    if driver_profile.run is None or PREVIOUS not in driver_profile.run.versions:
        pytest.skip(
            f"not applicable: {driver_profile.source.name} names no previous build (run.versions.previous) to "
            "downgrade to"
        )
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    record = DowngradeRecord(disruption.node, driver_profile.driver)
    claims: list[AllocatedClaim] = []
    generation: int | None = None
    try:
        for switch in SWITCHES:
            step = BuildStep(switch)
            record.steps.append(step)
            start = time.monotonic()
            with allure.step(f"switch the driver on {disruption.node} to its {switch} build"):
                disruption.kill()
                try:
                    disruption.start(PREVIOUS if switch == PREVIOUS else None)
                except (BackendError, UsageError) as error:
                    step.problems.append(f"the {switch} build did not come up with a complete pool: {error}")
                    break
            step.seconds = elapsed(start)
            check_pool_after_switch(
                api_client, driver_profile.driver, disruption.node, step, generation, timeouts.driver_ready
            )
            generation = step.generation or generation
            claim = disruption.allocate(tracker, build, api_client, device_class, timeouts.pod_scheduled)
            held = [d for earlier in claims for d in _devices(earlier)]
            doubled = sorted(_devices(claim) & set(held))
            if doubled:
                step.problems.append(f"claim {claim.ref.name} was allocated devices other claims hold: {doubled}")
            answer = kubelet.prepare(disruption.endpoint, [claim.ref]).claims.get(claim.ref.uid)
            if answer is None or answer.error:
                step.problems.append(f"prepare of {claim.ref.name} under the {switch} build failed: {answer}")
            claims.append(claim)
            step.claims_prepared.append(claim.ref.name)
        cdi = disruption.endpoint.cdi_dir
        for claim in claims:
            answer = kubelet.unprepare(disruption.endpoint, [claim.ref]).claims.get(claim.ref.uid)
            if answer is None or answer.error:
                record.problems.append(f"unprepare of {claim.ref.name} failed at the end: {answer}")
            left = (
                sorted(p.name for p in cdi.iterdir() if claim.ref.uid in p.read_text()) if cdi and cdi.is_dir() else []
            )
            if left:
                record.problems.append(
                    f"CDI spec {left} of {claim.ref.name} is left after its unprepare: the driver lost its prepared "
                    "state across a version change"
                )
    finally:
        disruption.back_to_own_build()
    text = record.to_json()
    allure.attach(text, "driver downgrade rehearsal", allure.attachment_type.JSON)
    request.node.user_properties.append((RECORD_KIND, text))
    run_records.add(RECORD_KIND, {"check": request.node.nodeid, "record": text})
    assert not record.all_problems, f"driver vN -> vN+1 -> vN on {disruption.node}: {record.all_problems}"
