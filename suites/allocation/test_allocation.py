"""Allocation layer: what the scheduler assigned (or why not), for every scenario of the catalog.

Each scenario is deployed on one node of the driver under test (the reference driver: an instance of its own;
any other driver: a node the test leases). Then: scheduled pods are bound to that node with claims allocated from
the driver's pools there and reserved for them; unschedulable pods say so in PodScheduled and a FailedScheduling
event; after the pods are deleted, claims are deallocated and generated claims are deleted.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import pytest

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.tracker import TrackedObject
from dra_conformance.scenarios.catalog import Scenario
from dra_conformance.scenarios.runner import ScenarioRun


def _allocation(claim: dict[str, Any]) -> dict[str, Any]:
    return (claim.get("status") or {}).get("allocation") or {}


def _check_scheduled_pod(run: ScenarioRun, pod: str, expected: dict[str, Any]) -> None:
    outcome = run.outcomes[pod]
    assert outcome.node == run.node, (
        f"pod {pod} not bound to {run.node}: node={outcome.node}, {outcome.scheduled_condition}"
    )
    published = run.slice_devices()
    pools = run.pools()
    for use, claim in run.pod_claims(pod).items():
        allocation = _allocation(claim)
        results = (allocation.get("devices") or {}).get("results") or []
        where = f"pod {pod} claim {use} ({claim['metadata']['name']})"
        assert results, f"{where}: not allocated: {claim.get('status')}"
        wrong = [
            r
            for r in results
            if r["driver"] != run.target.driver or r["pool"] not in pools or r["device"] not in published
        ]
        assert not wrong, (
            f"{where}: results outside the driver's pools {sorted(pools)} on {run.node} {sorted(published)}: {wrong}"
        )
        want = expected.get("claims", {}).get(use, {}).get("devices")
        if want is not None:
            assert len(results) == want, f"{where}: {len(results)} devices allocated, expected {want}: {results}"
        terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        fields = [f for t in terms for f in t.get("matchFields") or []]
        assert fields == [{"key": "metadata.name", "operator": "In", "values": [run.node]}], (
            f"{where}: nodeSelector {terms}"
        )
        reserved = {r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or []}
        assert outcome.uid in reserved, (
            f"{where}: reservedFor {claim['status'].get('reservedFor')} lacks pod uid {outcome.uid}"
        )


def _check_unschedulable_pod(run: ScenarioRun, pod: str, expected: dict[str, Any]) -> None:
    outcome = run.outcomes[pod]
    assert not outcome.scheduled, f"pod {pod} was bound to {outcome.node}; expected it to stay Pending"
    assert outcome.scheduled_condition.startswith("False/Unschedulable"), (
        f"pod {pod}: PodScheduled {outcome.scheduled_condition}"
    )
    messages = run.failed_scheduling_messages(pod)
    reason = expected.get("reason", "")
    assert any(reason in m for m in messages), f"pod {pod}: no FailedScheduling event with {reason!r}: {messages}"
    for use, claim in run.pod_claims(pod).items():
        assert not _allocation(claim), (
            f"pod {pod} claim {use} allocated although the pod is not scheduled: {claim['status']}"
        )


def _check_deallocation_after_pod_deletion(run: ScenarioRun) -> None:
    claims = {
        name: claim
        for pod in run.pods
        for name, claim in ((c["metadata"]["name"], c) for c in run.pod_claims(pod).values())
    }
    generated = {
        name
        for name, c in claims.items()
        if any(o["kind"] == "Pod" for o in c["metadata"].get("ownerReferences") or [])
    }
    # Pending pods go first: deleting a scheduled pod frees devices, and the scheduler would then allocate them to
    # a Pending pod that is about to be deleted, leaving a claim allocated but never used (which by design is
    # not deallocated).
    for logical in sorted(run.pods, key=lambda pod: run.outcomes[pod].scheduled):
        run.tracker.delete(TrackedObject("v1", "Pod", run.pods[logical], run.namespace))
    resource = run.tracker.resource(RESOURCE_API, "ResourceClaim")

    def state(name: str) -> str:
        found = resource.get(namespace=run.namespace, field_selector=f"metadata.name={name}").to_dict()["items"]
        if not found:
            return "deleted"
        status = found[0].get("status") or {}
        return "allocated" if status.get("allocation") or status.get("reservedFor") else "deallocated"

    for name in claims:
        want = "deleted" if name in generated else "deallocated"
        try:
            waits.until(
                functools.partial(state, name),
                functools.partial(operator.eq, want),
                timeout=run.timeouts.delete,
                what=f"claim {name} {want} after its pods were deleted",
                describe=str,
            )
        except WaitTimeout as error:
            pytest.fail(str(error), pytrace=False)


def test_scheduler_outcome_matches_the_scenario(
    scenario: Scenario, scenario_run: Callable[[Scenario], ScenarioRun]
) -> None:
    run = scenario_run(scenario)
    for pod in run.pods:
        expected = run.expected(pod)
        if expected.get("scheduled", True) and pod not in scenario.exactly_one_scheduled:
            _check_scheduled_pod(run, pod, expected)
        elif pod not in scenario.exactly_one_scheduled:
            _check_unschedulable_pod(run, pod, expected)
    if scenario.exactly_one_scheduled:
        winners = [p for p in scenario.exactly_one_scheduled if run.outcomes[p].scheduled]
        states = {p: run.outcomes[p].scheduled_condition for p in scenario.exactly_one_scheduled}
        assert len(winners) == 1, f"race for the last device: {len(winners)} winners {winners}; {states}"
        _check_scheduled_pod(run, winners[0], run.expected(winners[0]))
        loser = next(p for p in scenario.exactly_one_scheduled if p != winners[0])
        _check_unschedulable_pod(run, loser, {"reason": "cannot allocate all claims"})
    _check_deallocation_after_pod_deletion(run)
