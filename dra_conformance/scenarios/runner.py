"""Deploys a catalog scenario and observes each layer: allocation (scheduler), driver status, readiness.

The runner creates and observes; the suites assert. Every observation also goes into the test's correlation
record (claim UIDs, pod UIDs, node, driver calls, events), so a failure can be narrowed layer by layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from dra_conformance.driver.reference import PrivateDriver
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder, ClaimUse
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.pods import describe_pod, scheduled_condition, scheduling_state
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.kubelet.client import ClaimRef
from dra_conformance.scenarios.catalog import Scenario
from dra_conformance.timeouts import Timeouts

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def substitute(value: Any, driver: str, classes: dict[str, str]) -> Any:
    """Replace `{driver}` in strings and logical deviceClassName values with the real names, recursively."""
    if isinstance(value, str):
        return value.replace("{driver}", driver)
    if isinstance(value, list):
        return [substitute(item, driver, classes) for item in value]
    if isinstance(value, dict):
        return {
            key: classes[item] if key == "deviceClassName" else substitute(item, driver, classes)
            for key, item in value.items()
        }
    return value


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
    """One scenario deployed in the test's namespace against a private driver on one node."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        driver: PrivateDriver,
        tracker: ResourceTracker,
        api_client: client.ApiClient,
        namespace: str,
        timeouts: Timeouts,
    ) -> None:
        """Prepare to deploy `scenario`; nothing is created until `deploy`."""
        self.scenario = scenario
        self.driver = driver
        self.tracker = tracker
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.timeouts = timeouts
        self.node = next(iter(driver.processes))
        self.endpoint = driver.on(self.node).endpoint
        self.build = Builder(namespace=namespace, driver=driver.name)
        self.classes: dict[str, str] = {}
        self.claims: dict[str, str] = {}
        self.templates: dict[str, str] = {}
        self.pods: dict[str, str] = {}
        self.outcomes: dict[str, PodOutcome] = {}
        self.record = CorrelationRecord(scenario.id, namespace, driver.name, self.node)

    # --- deploy ---------------------------------------------------------------------------------------------

    def deploy(self) -> ScenarioRun:
        """Create everything and wait for each pod's scheduling outcome."""
        scenario = self.scenario
        if scenario.admin_namespace:
            self.core.patch_namespace(self.namespace, {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}})
        if scenario.fault:
            self.driver.on(self.node).control.set_faults([scenario.fault])
        for item in scenario.device_classes:
            selectors = tuple(
                s["cel"]["expression"].replace("{driver}", self.driver.name) for s in item.get("selectors", [])
            )
            self.classes[item["name"]] = self.tracker.create(self.build.device_class(selectors=selectors))["metadata"][
                "name"
            ]
        for item in scenario.claims:
            spec = substitute(item["spec"], self.driver.name, self.classes)
            self.claims[item["name"]] = self.tracker.create(self.build.claim_from_spec(spec))["metadata"]["name"]
        for item in scenario.claim_templates:
            spec = substitute(item["spec"], self.driver.name, self.classes)
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
        pod = self.tracker.create(self.build.pod_with(uses, prefix=item["name"]))
        self.pods[item["name"]] = pod["metadata"]["name"]

    def read_pod(self, logical: str) -> client.V1Pod:
        """The pod as it is now."""
        return self.core.read_namespaced_pod(self.pods[logical], self.namespace)

    def _await_outcome(self, logical: str) -> None:
        expected = self.scenario.expected(logical).get("scheduled")

        def decided(pod: client.V1Pod) -> bool:
            condition = scheduled_condition(pod)
            bound = bool(pod.spec.node_name)
            unschedulable = condition is not None and condition.reason == "Unschedulable"
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
            .get(field_selector=f"spec.driver={self.driver.name},spec.nodeName={self.node}")
            .to_dict()
        )
        return {d["name"] for s in listed["items"] for d in s["spec"].get("devices") or []}

    @staticmethod
    def ref(claim: dict[str, Any]) -> ClaimRef:
        """The claim as the kubelet names it."""
        return ClaimRef.of(claim)

    def finish_record(self) -> CorrelationRecord:
        """Add the driver's call log and the namespace's events to the record."""
        try:
            self.record.driver_calls = self.driver.on(self.node).control.calls()
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
