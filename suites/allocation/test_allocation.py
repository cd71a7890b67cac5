"""Allocation layer: what the scheduler and the resourceclaim controller do with each scenario of the catalog.

Each scenario is deployed on one node of the driver under test (the reference driver: an instance of its own;
any other driver: a node the test leases, checked to publish the devices its profile declares). What happens
then is the cluster's doing, judged by its contract: pods whose claims fit are bound to that node, with claims
allocated from devices the driver publishes there and reserved for them; pods whose claims cannot fit stay
Pending, say so in PodScheduled and a FailedScheduling event, and their claims stay unallocated; after the pods
are deleted, claims are deallocated and generated claims deleted. The driver's part is what it publishes: the
attributes its profile declares. What a scenario assumes beyond the profile (what attribute values mean, node-local
pools) is the suite's precondition. The obligations are in `dra_conformance/model/registry/allocation.yaml`.

A scenario that names an obligation of its own (selectors comparing a declared version attribute as a semver, a
declared capacity as a quantity) runs in a test of its own, which judges that obligation on each pod's scheduling
outcome first and then everything the other scenarios are judged by.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API
from dra_conformance.kube.tracker import TrackedObject
from dra_conformance.model.findings import Obligations
from dra_conformance.scenarios.catalog import UNSCHEDULABLE, Scenario
from dra_conformance.scenarios.runner import ScenarioRun, substitute


@dataclass(frozen=True)
class PublishedDevice:
    """One device the driver under test publishes, where, and with which attributes."""

    # The node of a node-local slice (or of the device, with perDeviceNodeSelection); None for a pool that
    # nodeSelector or allNodes makes available.
    node: str | None
    attributes: dict[str, Any] = field(default_factory=dict)


def _allocation(claim: dict[str, Any]) -> dict[str, Any]:
    return (claim.get("status") or {}).get("allocation") or {}


def _published(run: ScenarioRun) -> dict[tuple[str, str], PublishedDevice]:
    """Every device the driver under test publishes, on any node, by (pool, device), at its pool's generation."""
    listed = (
        run.tracker.resource(RESOURCE_API, "ResourceSlice")
        .get(field_selector=f"spec.driver={run.target.driver}")
        .to_dict()
    )
    specs = [item["spec"] for item in listed["items"]]
    generation: dict[str, int] = {}
    for spec in specs:
        pool = spec["pool"]
        generation[pool["name"]] = max(generation.get(pool["name"], 0), int(pool["generation"]))
    devices = {}
    for spec in specs:
        if int(spec["pool"]["generation"]) != generation[spec["pool"]["name"]]:
            continue
        for device in spec.get("devices") or []:
            node = device.get("nodeName") if spec.get("perDeviceNodeSelection") else spec.get("nodeName")
            devices[(spec["pool"]["name"], device["name"])] = PublishedDevice(node, device.get("attributes") or {})
    return devices


def _attribute(device: PublishedDevice, driver: str, name: str) -> tuple[str, Any] | None:
    """(type, value) of attribute `name` of `device`; a name without a domain is in the driver's domain."""
    qualified = name if "/" in name else f"{driver}/{name}"
    domain, _, bare = qualified.rpartition("/")
    value = device.attributes.get(qualified) or (device.attributes.get(bare) if domain == driver else None)
    if not value:
        return None
    kind, raw = next(iter(value.items()))
    return str(kind), raw


def _constrained_claims(run: ScenarioRun) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Claims and templates of the scenario that have constraints.

    Each as (name, spec resolved for this run, whether the pods using it are expected to be scheduled).
    """
    scenario = run.scenario
    for kind, items in (("claim", scenario.claims), ("template", scenario.claim_templates)):
        for item in items:
            spec = substitute(item["spec"], run.target.driver, run.classes, run.target.devices)
            pods = [p["name"] for p in scenario.pods if any(u.get(kind) == item["name"] for u in p["claims"])]
            if spec["devices"].get("constraints") and pods:
                yield item["name"], spec, any(run.expected(p).get("scheduled", True) for p in pods)


def _devices_asked(spec: dict[str, Any], requests: set[str]) -> int:
    """Devices the named requests of a claim spec ask for (all requests if none are named)."""
    total = 0
    for request in spec["devices"]["requests"]:
        if requests and request["name"] not in requests:
            continue
        exactly = request.get("exactly") or {}
        total += int(exactly.get("count", 1)) if exactly.get("allocationMode", "ExactCount") == "ExactCount" else 1
    return total


def _check_scenario_devices(
    obligations: Obligations, run: ScenarioRun, published: dict[tuple[str, str], PublishedDevice]
) -> None:
    """What the scenario rests on in the node's devices.

    The attributes it uses are published as the profile declares them (the driver's promise), and their values
    make its constraints come out as the scenario expects (the catalog's assumption).
    """
    driver = run.target.driver
    on_node = {f"{pool}/{name}": device for (pool, name), device in published.items() if device.node == run.node}
    for name, kind in run.scenario.attributes.items():
        found = {key: _attribute(device, driver, name) for key, device in on_node.items()}
        wrong = {key: value for key, value in found.items() if value is None or value[0] != kind.value}
        obligations.check(
            "allocation.declared-attributes-published",
            bool(on_node) and not wrong,
            # Keyed by the attribute's name: a serial-like attribute's values are masked by it (model.masking).
            {
                "attribute": f"{name} ({kind.value}) missing or of another type",
                "on": {k: {name: v} for k, v in wrong.items()},
            }
            if on_node
            else f"attribute {name}: no device on the node",
            f"node {run.node}",
        )
    for claim, spec, scheduled in _constrained_claims(run):
        for constraint in spec["devices"]["constraints"]:
            match = "matchAttribute" in constraint
            attribute = constraint["matchAttribute"] if match else constraint["distinctAttribute"]
            needed = _devices_asked(spec, set(constraint.get("requests") or []))
            values = [value[1] for device in on_node.values() if (value := _attribute(device, driver, attribute))]
            most = max(Counter(values).values(), default=0) if match else len(set(values))
            obligations.check(
                "allocation.constraint-outcome-follows-from-attribute-values",
                (most >= needed) == scheduled,
                {
                    "constraint": f"{'matchAttribute' if match else 'distinctAttribute'} {attribute}",
                    "devices asked": needed,
                    f"values on {run.node}": {attribute: values},  # keyed by name: a serial-like one is masked
                    "the scenario expects its pod": "scheduled" if scheduled else "pending",
                },
                f"claim {claim}",
            )


def _check_scheduled_pod(
    obligations: Obligations,
    run: ScenarioRun,
    pod: str,
    expected: dict[str, Any],
    published: dict[tuple[str, str], PublishedDevice],
) -> None:
    outcome = run.outcomes[pod]
    obligations.check(
        "allocation.satisfiable-pod-bound-to-its-node",
        outcome.node == run.node,
        f"bound to {outcome.node or 'no node'} (pinned to {run.node}): {outcome.scheduled_condition}",
        f"pod {pod}",
    )
    for use, claim in run.pod_claims(pod).items():
        allocation = _allocation(claim)
        results = (allocation.get("devices") or {}).get("results") or []
        where = f"pod {pod} claim {use} ({claim['metadata']['name']})"
        obligations.check("allocation.bound-pod-claim-allocated", bool(results), claim.get("status"), where)
        unpublished = [
            r for r in results if r["driver"] != run.target.driver or (r["pool"], r["device"]) not in published
        ]
        on_node = sorted(f"{pool}/{name}" for (pool, name), d in published.items() if d.node == run.node)
        obligations.check(
            "allocation.result-is-a-published-device",
            not unpublished,
            f"{unpublished}; {run.target.driver} publishes on {run.node}: {on_node}",
            where,
        )
        devices = {(r["pool"], r["device"]): published[(r["pool"], r["device"])] for r in results}
        shared = [key for key, device in devices.items() if device.node is None]
        obligations.check("allocation.node-local-pool", not shared, f"not node-local: {shared}", where)
        elsewhere = {f"{pool}/{name}": d.node for (pool, name), d in devices.items() if d.node != outcome.node}
        obligations.check(
            "allocation.device-local-to-the-pods-node",
            not elsewhere,
            f"published for other nodes: {elsewhere}; the pod is on {outcome.node}",
            where,
        )
        want = expected.get("claims", {}).get(use, {}).get("devices")
        if want is not None:
            obligations.check(
                "allocation.device-count-as-requested",
                len(results) == want,
                f"{len(results)} devices allocated, the scenario expects {want}: {results}",
                where,
            )
        terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        fields = [f for t in terms for f in t.get("matchFields") or []]
        obligations.check(
            "allocation.node-selector-names-the-node",
            fields == [{"key": "metadata.name", "operator": "In", "values": [outcome.node]}],
            f"nodeSelector terms {terms}",
            where,
        )
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        obligations.check(
            "allocation.claim-reserved-for-its-pod",
            outcome.uid in {r["uid"] for r in reserved},
            f"reservedFor {reserved} lacks pod uid {outcome.uid}",
            where,
        )


def _check_unschedulable_pod(obligations: Obligations, run: ScenarioRun, pod: str, expected: dict[str, Any]) -> None:
    outcome = run.outcomes[pod]
    where = f"pod {pod}"
    obligations.check(
        "allocation.unsatisfiable-pod-not-bound",
        not outcome.scheduled,
        f"bound to {outcome.node}: {outcome.scheduled_condition}",
        where,
    )
    refused_as = expected.get("condition", UNSCHEDULABLE)
    obligations.check(
        "allocation.unschedulable-condition",
        outcome.scheduled_condition.startswith(f"False/{refused_as}"),
        f"PodScheduled {outcome.scheduled_condition} (expected False/{refused_as})",
        where,
    )
    messages = run.failed_scheduling_messages(pod)
    reason = expected.get("reason", "")
    obligations.check(
        "allocation.failed-scheduling-event-gives-the-reason",
        any(reason in m for m in messages),
        f"no FailedScheduling event with {reason!r}: {messages}",
        where,
    )
    for use, claim in run.pod_claims(pod).items():
        obligations.check(
            "allocation.unbound-pod-claim-unallocated",
            not _allocation(claim),
            f"allocated although the pod is not bound: {claim.get('status')}",
            f"{where} claim {use}",
        )


def _check_deallocation_after_pod_deletion(obligations: Obligations, run: ScenarioRun) -> None:
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
        want, obligation = (
            ("deleted", "allocation.generated-claim-deleted-with-its-pod")
            if name in generated
            else ("deallocated", "allocation.claim-deallocated-after-its-pods")
        )
        try:
            reached = waits.until(
                functools.partial(state, name),
                functools.partial(operator.eq, want),
                timeout=run.timeouts.delete,
                what=f"claim {name} {want} after its pods were deleted",
                describe=str,
            )
        except WaitTimeout as error:
            reached = f"still {error.last_observed} {error.timeout:g} s after its pods were deleted"
        obligations.check(obligation, reached == want, reached, f"claim {name}")


def _check_scenario_obligation(obligations: Obligations, run: ScenarioRun) -> None:
    """The obligation the scenario names, on each pod's scheduling outcome.

    A pod the scenario expects scheduled is bound to the scenario's node; one it expects pending is refused with the
    PodScheduled reason it names (Unschedulable by default: no device matched, which is not an error).
    """
    obligation = run.scenario.obligation
    if obligation is None:
        return
    selectors = [
        s["cel"]["expression"].replace("{driver}", run.target.driver)
        for c in run.scenario.device_classes
        for s in c.get("selectors", [])
    ]
    for pod in run.pods:
        if pod in run.scenario.exactly_one_scheduled:
            continue
        outcome = run.outcomes[pod]
        expected = run.expected(pod)
        if expected.get("scheduled", True):
            holds, wanted = outcome.node == run.node, f"bound to {run.node}"
        else:
            refused_as = expected.get("condition", UNSCHEDULABLE)
            holds = not outcome.scheduled and outcome.scheduled_condition.startswith(f"False/{refused_as}")
            wanted = f"pending with PodScheduled False/{refused_as}"
        obligations.check(
            obligation,
            holds,
            {
                "expected": wanted,
                "bound to": outcome.node,
                "PodScheduled": outcome.scheduled_condition,
                "class selectors": selectors,
            },
            f"pod {pod}",
        )


def _judge(obligations: Obligations, run: ScenarioRun) -> None:
    """Every generic obligation of the allocation layer, on a deployed scenario."""
    scenario = run.scenario
    published = _published(run)
    _check_scenario_devices(obligations, run, published)
    racing = scenario.exactly_one_scheduled
    for pod in run.pods:
        if pod in racing:
            continue
        expected = run.expected(pod)
        if expected.get("scheduled", True):
            _check_scheduled_pod(obligations, run, pod, expected, published)
        else:
            _check_unschedulable_pod(obligations, run, pod, expected)
    if racing:
        winners = [p for p in racing if run.outcomes[p].scheduled]
        states = {p: run.outcomes[p].scheduled_condition for p in racing}
        obligations.check(
            "allocation.one-pod-wins-the-last-devices",
            len(winners) == 1,
            f"{len(winners)} winners {winners}: {states}",
            f"pods {racing}",
        )
        _check_scheduled_pod(obligations, run, winners[0], run.expected(winners[0]), published)
        loser = next(p for p in racing if p != winners[0])
        _check_unschedulable_pod(obligations, run, loser, {"reason": "cannot allocate all claims"})
    _check_deallocation_after_pod_deletion(obligations, run)


@pytest.mark.scenarios(own_obligation=False)
def test_scheduler_allocates_what_fits_on_the_node_refuses_what_does_not_and_claims_are_released_after_their_pods(
    scenario: Scenario,
    scenario_run: Callable[[Scenario], ScenarioRun],
    obligations: Obligations,
) -> None:
    _judge(obligations, scenario_run(scenario))


@pytest.mark.scenarios(own_obligation=True)
def test_a_selector_comparing_a_declared_version_as_semver_or_a_declared_capacity_as_quantity_matches_by_its_type(
    scenario: Scenario,
    scenario_run: Callable[[Scenario], ScenarioRun],
    obligations: Obligations,
) -> None:
    run = scenario_run(scenario)
    _check_scenario_obligation(obligations, run)
    _judge(obligations, run)
