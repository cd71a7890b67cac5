"""Deploys a catalog scenario and observes each layer: allocation (scheduler), driver status, readiness.

The runner creates and observes; the suites assert. Every observation also goes into the test's correlation
record (claim UIDs, pod UIDs, node, driver calls, events), so a failure can be narrowed layer by layer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from dra_conformance.driver.pool import node_pools
from dra_conformance.driver.reference import FakeDriverControl
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder, ClaimUse, Manifest, PodHold
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.pods import describe_pod, scheduled_condition, scheduling_state
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import ClaimRef
from dra_conformance.model.driver import DriverEndpoint
from dra_conformance.scenarios.catalog import UNSCHEDULABLE, Scenario
from dra_conformance.timeouts import Timeouts

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


_RELATIVE_COUNT = re.compile(r"^\{devices([+-][0-9]+)?\}$")


def substitute(value: Any, driver: str, classes: dict[str, str], devices: int) -> Any:
    """Resolve a catalog value for one run, recursively.

    `{driver}` in strings becomes the driver name, logical deviceClassName values the real class names, and a
    relative count (`"{devices}"`, `"{devices+1}"`) a number of the `devices` on the scenario's node.
    """
    if isinstance(value, str):
        relative = _RELATIVE_COUNT.match(value)
        if relative:
            return devices + int(relative.group(1) or 0)
        return value.replace("{driver}", driver)
    if isinstance(value, list):
        return [substitute(item, driver, classes, devices) for item in value]
    if isinstance(value, dict):
        return {
            key: classes[item] if key == "deviceClassName" else substitute(item, driver, classes, devices)
            for key, item in value.items()
        }
    return value


@dataclass(frozen=True)
class ScenarioTarget:
    """Where a scenario runs: one node of one driver, and what the test can reach of that driver there."""

    driver: str
    node: str
    # Devices the driver publishes on the node; relative counts in the scenario resolve against it.
    devices: int
    # Its kubelet-plugin sockets on the node, where this machine can reach them.
    endpoint: DriverEndpoint | None = None
    # The reference driver's fault switches and call log; None for any other driver.
    control: FakeDriverControl | None = None
    # What the scenario's pods need to land on the node (the set-aside taint's toleration).
    tolerations: tuple[Manifest, ...] = ()
    # Where the node has a real kubelet (a cluster the suite did not build): how its pods are held (`PodHold`).
    hold: PodHold | None = None
    # The driver the run installed (not a private instance this test alone uses): a fault switched is undone.
    shared: bool = False


@dataclass
class CorrelationRecord:
    """What ties the layers of one test together; attached to the report as JSON."""

    scenario: str
    namespace: str
    driver: str
    node: str
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    driver_calls: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        """Pretty JSON for the report."""
        return json.dumps(self.__dict__, indent=2, default=str)


@dataclass
class PodOutcome:
    """Where a pod ended up after scheduling."""

    name: str
    uid: str
    node: str | None
    scheduled_condition: str

    @property
    def scheduled(self) -> bool:
        """Bound to a node."""
        return self.node is not None


class ScenarioRun:
    """One scenario deployed in the test's namespace against one driver on one node (see `ScenarioTarget`)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        target: ScenarioTarget,
        tracker: ResourceTracker,
        api_client: client.ApiClient,
        namespace: str,
        timeouts: Timeouts,
    ) -> None:
        """Prepare to deploy `scenario`; nothing is created until `deploy`."""
        self.scenario = scenario
        self.target = target
        self.tracker = tracker
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.timeouts = timeouts
        self.node = target.node
        self.build = Builder(namespace=namespace, driver=target.driver, hold=target.hold)
        self.classes: dict[str, str] = {}
        self.claims: dict[str, str] = {}
        self.templates: dict[str, str] = {}
        self.pods: dict[str, str] = {}
        self.outcomes: dict[str, PodOutcome] = {}
        self.record = CorrelationRecord(scenario.id, namespace, target.driver, self.node)
        self._fault_undo: Callable[[], None] | None = None

    @property
    def endpoint(self) -> DriverEndpoint:
        """The driver's sockets on the scenario's node (suites that prepare ensure there is one)."""
        if self.target.endpoint is None:
            raise RuntimeError(f"no reachable kubelet-plugin socket of {self.target.driver} on {self.node}")
        return self.target.endpoint

    def expected(self, pod: str) -> dict[str, Any]:
        """The scenario's expectations for `pod`, with relative counts resolved for this run."""
        return dict(substitute(self.scenario.expected(pod), self.target.driver, {}, self.target.devices))

    # --- deploy ---------------------------------------------------------------------------------------------

    def deploy(self) -> ScenarioRun:
        """Create everything and wait for each pod's scheduling outcome."""
        scenario = self.scenario
        if scenario.admin_namespace:
            self.core.patch_namespace(self.namespace, {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}})
        if scenario.fault:
            if self.target.control is None:
                raise RuntimeError(f"scenario {scenario.id} switches a fault; {self.target.driver} has no switches")
            self._fault_undo = self.target.control.set_faults([scenario.fault])
        for item in scenario.device_classes:
            selectors = tuple(
                s["cel"]["expression"].replace("{driver}", self.target.driver) for s in item.get("selectors", [])
            )
            self.classes[item["name"]] = self.tracker.create(self.build.device_class(selectors=selectors))["metadata"][
                "name"
            ]
        for item in scenario.claims:
            spec = substitute(item["spec"], self.target.driver, self.classes, self.target.devices)
            self.claims[item["name"]] = self.tracker.create(self.build.claim_from_spec(spec))["metadata"]["name"]
        for item in scenario.claim_templates:
            spec = substitute(item["spec"], self.target.driver, self.classes, self.target.devices)
            self.templates[item["name"]] = self.tracker.create(self.build.template_from_spec(spec))["metadata"]["name"]
        together = bool(scenario.exactly_one_scheduled)
        for item in scenario.pods:
            self._create_pod(item)
            if not together:
                self._await_outcome(item["name"])
        if together:
            for item in scenario.pods:
                self._await_outcome(item["name"])
        return self

    def _create_pod(self, item: dict[str, Any]) -> None:
        uses = [
            ClaimUse(
                u["name"], claim=self.claims.get(u.get("claim", "")), template=self.templates.get(u.get("template", ""))
            )
            for u in item["claims"]
        ]
        manifest = self.build.pod_with(uses, prefix=item["name"], node=self.node, tolerations=self.target.tolerations)
        pod = self.tracker.create(self.build.held(manifest))
        self.pods[item["name"]] = pod["metadata"]["name"]

    def read_pod(self, logical: str) -> client.V1Pod:
        """The pod as it is now."""
        return self.core.read_namespaced_pod(self.pods[logical], self.namespace)

    def _await_outcome(self, logical: str) -> None:
        expected = self.expected(logical).get("scheduled")
        refused_as = self.expected(logical).get("condition", UNSCHEDULABLE)

        def decided(pod: client.V1Pod) -> bool:
            condition = scheduled_condition(pod)
            bound = bool(pod.spec.node_name)
            unschedulable = condition is not None and condition.reason == refused_as
            if expected is True:
                return bound
            if expected is False:
                return unschedulable
            return bound or unschedulable

        try:
            pod = waits.until(
                lambda: self.read_pod(logical),
                decided,
                timeout=self.timeouts.pod_scheduled,
                what=f"scheduling outcome of pod {logical}",
                describe=describe_pod,
            )
        except WaitTimeout:
            pod = self.read_pod(logical)  # the suite asserts on what was observed, with that state in the message
        self.outcomes[logical] = PodOutcome(
            pod.metadata.name, pod.metadata.uid, pod.spec.node_name, scheduling_state(pod)
        )
        self.record.pods[logical] = {
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
            "node": pod.spec.node_name,
            "scheduled": self.outcomes[logical].scheduled_condition,
        }

    # --- observe --------------------------------------------------------------------------------------------

    def pod_claims(self, logical: str) -> dict[str, dict[str, Any]]:
        """The pod's claims by their name in the pod (generated claims resolved through the pod status)."""
        pod = self.read_pod(logical)
        generated = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses or []}
        result = {}
        for reference in pod.spec.resource_claims or []:
            name = reference.resource_claim_name or generated.get(reference.name)
            if name:
                claim = self.tracker.get(RESOURCE_API, "ResourceClaim", name, self.namespace)
                result[reference.name] = claim
                status = claim.get("status") or {}
                self.record.claims[name] = {
                    "uid": claim["metadata"]["uid"],
                    "pod": logical,
                    "allocation": status.get("allocation"),
                    "reservedFor": status.get("reservedFor"),
                    "devices": device_statuses(claim),
                }
        return result

    def failed_scheduling_messages(self, logical: str) -> list[str]:
        """Messages of FailedScheduling events for a pod, waiting until at least one is there."""
        name = self.pods[logical]

        def events() -> list[str]:
            listed = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}")
            return [e.message for e in listed.items if e.reason == "FailedScheduling"]

        try:
            return waits.until(
                events, bool, timeout=self.timeouts.pod_scheduled, what=f"FailedScheduling event for pod {logical}"
            )
        except WaitTimeout:
            return []

    def slice_devices(self) -> set[str]:
        """Device names the driver currently publishes."""
        listed = (
            self.tracker.resource(RESOURCE_API, "ResourceSlice")
            .get(field_selector=f"spec.driver={self.target.driver},spec.nodeName={self.node}")
            .to_dict()
        )
        return {d["name"] for s in listed["items"] for d in s["spec"].get("devices") or []}

    def pools(self) -> set[str]:
        """Names of the pools the driver publishes for the scenario's node."""
        return set(node_pools(self.api_client, self.target.driver, self.node))

    @staticmethod
    def ref(claim: dict[str, Any]) -> ClaimRef:
        """The claim as the kubelet names it."""
        return ClaimRef.of(claim)

    def undo_fault(self) -> None:
        """Switch the scenario's fault off again on a driver other tests use (a private instance just ends)."""
        undo, self._fault_undo = self._fault_undo, None
        if undo is not None and self.target.shared:
            undo()

    def finish_record(self) -> CorrelationRecord:
        """Add the driver's call log (the reference driver keeps one) and the namespace's events to the record."""
        if self.target.control is not None:
            try:
                self.record.driver_calls = self.target.control.calls()
            except Exception as error:  # a crashed driver must not hide the record
                self.record.driver_calls = [{"error": str(error)}]
        events = self.core.list_namespaced_event(self.namespace).items
        self.record.events = [
            {
                "object": f"{e.involved_object.kind}/{e.involved_object.name}",
                "type": e.type,
                "reason": e.reason,
                "message": e.message,
            }
            for e in sorted(events, key=lambda e: str(e.last_timestamp or e.event_time or ""))
        ]
        return self.record
