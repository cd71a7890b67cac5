"""Driver vN -> vN+1 -> vN with claims in flight: pools stay current, prepared claims stay known, nothing doubles.

Runs for any driver whose profile names its previous build (`run.versions.previous`) on a backend that runs the
driver's processes (the local backend), on a set-aside node leased for it. The kubelet's part (prepare, unprepare)
is played by the test, as in the protocol suite.

Each problem is recorded (the record goes to the report) under the obligation it breaks (`rollback.yaml`); the
verdict checks every obligation the rehearsal got to exercise. A build the backend cannot switch to is a
precondition; a build that does not come up with its pool, a stale slice, a failed prepare or unprepare and state
lost across the switch are the driver's; a device allocated twice is the scheduler's.
"""

from __future__ import annotations

import time

import allure
import grpc
import pytest
from kubernetes import client

from dra_conformance.driver.disruption import Disruption
from dra_conformance.driver.profile import DriverProfile
from dra_conformance.errors import BackendError, DriverStartError, UsageError
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.allocation import AllocatedClaim
from dra_conformance.kubelet.role import KubeletRole
from dra_conformance.model.findings import Obligations
from dra_conformance.model.records import RunRecords
from dra_conformance.rollback.driver_versions import (
    PREVIOUS,
    SWITCHES,
    BuildStep,
    DowngradeRecord,
    check_pool_after_switch,
    elapsed,
    pool_slices,
)
from dra_conformance.timeouts import Timeouts

from .phase_verdicts import Kinds, by_kind, judge, kind

RECORD_KIND = "driver-downgrade"
# What check_pool_after_switch records (dra_conformance.rollback.driver_versions), by the obligation each kind breaks.
POOL_KINDS: Kinds = (
    kind("rollback.build-comes-up-with-a-complete-pool", r"no complete pool on "),
    kind("rollback.pool-generation-advances-on-a-switch", r"pool generation \d+ is not newer than "),
    kind("rollback.no-slice-of-an-older-generation-left", r"slices of an older generation are still published"),
)


def _devices(claim: AllocatedClaim) -> set[tuple[str, str]]:
    return {(r["pool"], r["device"]) for r in claim.results}


def _shareable(api_client: client.ApiClient, driver: str, node: str) -> set[tuple[str, str]]:
    """The node's devices that allow multiple allocations (a claim may share them with another)."""
    return {
        (item["spec"]["pool"]["name"], device["name"])
        for item in pool_slices(api_client, driver, node)
        for device in item["spec"].get("devices") or []
        if device.get("allowMultipleAllocations")
    }


class Findings:
    """The problems of each obligation the rehearsal exercised; each one also goes to the record's problems."""

    def __init__(self) -> None:
        """No obligation exercised yet."""
        self.found: dict[str, list[str]] = {}
        self.unknown: list[str] = []

    def note(self, problems: list[str], obligation: str, problem: str | None = None) -> None:
        """`obligation` was exercised; `problem` (into `problems` too) where it broke."""
        self.found.setdefault(obligation, [])
        if problem is not None:
            self.found[obligation].append(problem)
            problems.append(problem)

    def classify(self, problems: list[str], kinds: Kinds, exercised: list[str]) -> None:
        """Problems an engine check recorded, by kind; the obligations in `exercised` were checked by it."""
        found, unknown = by_kind(problems, kinds)
        for obligation in exercised:
            self.found.setdefault(obligation, []).extend(found[obligation])
        self.unknown.extend(unknown)


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
    obligations: Obligations,
) -> None:
    if driver_profile.run is None or PREVIOUS not in driver_profile.run.versions:
        pytest.skip(
            f"not applicable: {driver_profile.source.name} names no previous build (run.versions.previous) to "
            "downgrade to"
        )
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    record = DowngradeRecord(disruption.node, driver_profile.driver)
    findings = Findings()
    claims: list[AllocatedClaim] = []
    # The claim the running process prepared itself (None until it did): its CDI spec shows whether the driver
    # removes specs on unprepare at all, those of the others whether it still knows claims earlier builds prepared.
    own: str | None = None
    # The last switch that found a complete pool: the next one's pool is newer unless it says the same.
    last: BuildStep | None = None
    try:
        for switch in SWITCHES:
            step = BuildStep(switch)
            record.steps.append(step)
            start = time.monotonic()
            own = None
            with allure.step(f"switch the driver on {disruption.node} to its {switch} build"):
                disruption.kill()
                try:
                    disruption.start(PREVIOUS if switch == PREVIOUS else None)
                except DriverStartError as error:
                    findings.note(
                        step.problems,
                        "rollback.build-comes-up-with-a-complete-pool",
                        f"the {switch} build did not come up with a complete pool: {error}",
                    )
                    break
                except (BackendError, UsageError) as error:
                    findings.note(
                        step.problems,
                        "rollback.build-switch-possible",
                        f"the backend could not start the {switch} build: {error}",
                    )
                    break
            findings.note(step.problems, "rollback.build-switch-possible")
            step.seconds = elapsed(start)
            checked = len(step.problems)
            check_pool_after_switch(
                api_client, driver_profile.driver, disruption.node, step, last, timeouts.driver_ready
            )
            exercised = ["rollback.build-comes-up-with-a-complete-pool"]
            if step.generation is not None:
                exercised.append("rollback.no-slice-of-an-older-generation-left")
                if last is not None:
                    exercised.append("rollback.pool-generation-advances-on-a-switch")
            findings.classify(step.problems[checked:], POOL_KINDS, exercised)
            if step.generation is not None:
                last = step
            claim = disruption.allocate(tracker, build, api_client, device_class, timeouts.pod_scheduled)
            held = {d for earlier in claims for d in _devices(earlier)}
            doubled = sorted((_devices(claim) & held) - _shareable(api_client, driver_profile.driver, disruption.node))
            findings.note(
                step.problems,
                "rollback.devices-not-allocated-twice",
                f"claim {claim.ref.name} was allocated devices other claims hold: {doubled}" if doubled else None,
            )
            outcome = kubelet.prepare_outcome(disruption.endpoint, [claim.ref])
            prepared = outcome.prepared(claim.ref)
            findings.note(
                step.problems,
                "rollback.prepare-succeeds-across-versions",
                None
                if prepared
                else f"prepare of {claim.ref.name} under the {switch} build failed: {outcome.describe()}",
            )
            if prepared:
                own = claim.ref.uid
            claims.append(claim)
            step.claims_prepared.append(claim.ref.name)
        cdi = disruption.endpoint.cdi_dir
        left: dict[str, list[str]] = {}
        for claim in claims:
            try:
                answer = kubelet.unprepare(disruption.endpoint, [claim.ref]).claims.get(claim.ref.uid)
                failed = None if answer is not None and not answer.error else str(answer)
            except grpc.RpcError as error:
                failed = f"whole-call error {error.code().name}: {error.details()}"
            findings.note(
                record.problems,
                "rollback.unprepare-succeeds-across-versions",
                None if failed is None else f"unprepare of {claim.ref.name} failed at the end: {failed}",
            )
            if failed is None and cdi is not None and cdi.is_dir():
                specs = sorted(p.name for p in cdi.iterdir() if claim.ref.uid in p.read_text())
                if specs:
                    left[claim.ref.uid] = [f"CDI spec {specs} of {claim.ref.name}"]
        if cdi is not None and cdi.is_dir():
            specs_left = [spec for specs in left.values() for spec in specs]
            if own is not None and own not in left:
                # The driver removed the spec of the claim it prepared itself: those of earlier builds' claims must
                # have gone too, else it lost what they prepared.
                findings.note(
                    record.problems,
                    "rollback.prepared-state-kept-across-versions",
                    f"{specs_left} left after unprepare: the driver lost its prepared state across a version change"
                    if left
                    else None,
                )
            else:
                findings.note(
                    record.problems,
                    "rollback.cdi-specs-removed-on-unprepare",
                    f"{specs_left} left after unprepare" if left else None,
                )
    finally:
        disruption.back_to_own_build()
    text = obligations.mask(record).to_json()  # the pool's attribute values, serial-like ones masked by name
    allure.attach(text, "driver downgrade rehearsal", allure.attachment_type.JSON)
    request.node.user_properties.append((RECORD_KIND, text))
    run_records.add(RECORD_KIND, {"check": request.node.nodeid, "record": text})
    judge(obligations, findings.found, findings.unknown, f"driver vN -> vN+1 -> vN on {disruption.node}")
