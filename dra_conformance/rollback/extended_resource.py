"""Device plugin -> DRA -> device plugin, for pods that ask for an extended resource (DRAExtendedResource, GA 1.37).

A DeviceClass with `spec.extendedResourceName` lets DRA serve pods that request that extended resource, but only
on nodes that do not advertise it as allocatable: where a device plugin (or, on fake nodes, the node's status)
advertises it, the device plugin serves it. A pod DRA served names its claim in
`status.extendedResourceClaimStatus`; the scheduler creates that claim, annotated
`resource.kubernetes.io/extended-resource-claim`, and it goes with the pod.

The rehearsal keeps one namespace of its own across the phases (and across runs, through the state file):
workloads started in one phase are checked in the next. A correct rollback drains the pods DRA serves, then
removes the DeviceClass; removing the class first leaves pods holding claims of a class that is gone, which the
`after_rollback` phase reports as left behind.

The device-plugin path is a real device plugin where a node advertises the resource through a real kubelet (on
the local cluster's real node, the reference plugin `device_plugin` beside this module, registered with that
kubelet): its workloads must run (Ready), tolerate the node's taints, and show the devices the plugin allocated
them. Only on a fake (kwok) node does a status patch stand in for the device plugin. Every phase record says which
it was.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import PAUSE_IMAGE, RESOURCE_API, TEST_POD_GRACE_SECONDS, Manifest, pin_to_node
from dra_conformance.kube.nodes import named_nodes
from dra_conformance.kube.pods import describe_pod, pod_ready, scheduled_condition
from dra_conformance.model.stats import percentile
from dra_conformance.rollback.device_plugin import DEVICE_IDS_ENV
from dra_conformance.rollback.state import Phase, PhaseRecord, RehearsalState
from dra_conformance.timeouts import Timeouts

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
# kwok marks the Nodes it manages; only there does a status patch stand in for a device plugin (a kubelet would
# overwrite it with what its device plugins report).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# Devices the stand-in device plugin advertises on a fake node: one per device-plugin workload the phases start (3).
ADVERTISED_DEVICES = 3
DEVICE_PLUGIN, DRA = "device-plugin", "dra"
# What serves the device-plugin path, as the phase records name it.
REAL_DEVICE_PLUGIN = "real device plugin (kubelet device plugin API v1beta1)"
STAND_IN = "stand-in (extended resource patched into a fake node's status)"
# A workload with a shell prints its environment (its devices among it), then stays up holding them.
PRINT_ENV_AND_WAIT = ["sh", "-c", "env; exec sleep 3600"]
# Taints the node lifecycle controller sets for a node's conditions (not-ready, unreachable, pressure): a node
# carrying one is not a place to run the rehearsal, and they are never tolerated.
CONDITION_TAINT_PREFIX = "node.kubernetes.io/"


def baseline_prefix(path: str) -> str:
    """Names of a path's canary baseline pods: `<prefix>-<n>` (the canary gate finds them by it)."""
    return f"baseline-{path}"


# Pods per path for the canary baseline: enough for a p95 that is not the maximum of two, few enough for CI.
BASELINE_SAMPLES = 8


@dataclass(frozen=True)
class RehearsalSetup:
    """Where the rehearsal runs; recorded by `before` and read back by later phases."""

    resource: str
    driver: str
    namespace: str
    # The node that serves the resource through a device plugin (or the stand-in on a fake node).
    plugin_node: str
    # A node of the driver under test that does not advertise the resource.
    dra_node: str
    # Whether the suite advertised the resource on plugin_node itself (then it withdraws it at the end).
    advertised_by_suite: bool


@dataclass(frozen=True)
class PluginNode:
    """How the device-plugin node serves the resource, and what a pod needs to run there."""

    name: str
    # A kubelet advertises the resource (a real device plugin), not a status patch on a fake node.
    real: bool
    # Tolerations of the node's own taints (a real node may keep other pods away).
    tolerations: tuple[Manifest, ...] = ()
    # The workload image: a busybox the node has (to show the allocated devices), else the pause image.
    image: str = PAUSE_IMAGE

    @property
    def shell(self) -> bool:
        """Whether the workload image has a shell (then the container prints its environment)."""
        return self.image != PAUSE_IMAGE

    @classmethod
    def read(cls, core: client.CoreV1Api, name: str) -> PluginNode:
        """The node `name` as the API shows it now."""
        node = core.read_node(name)
        if (node.metadata.annotations or {}).get(KWOK_NODE_ANNOTATION):
            return cls(name, real=False)
        images = [n for image in node.status.images or [] for n in image.names or []]
        busybox = next((n for n in images if "busybox" in n and "@" not in n), None)
        return cls(name, real=True, tolerations=tolerations_of(node), image=busybox or PAUSE_IMAGE)

    def describe(self, core: client.CoreV1Api, resource: str) -> dict[str, Any]:
        """Facts for the phase records: which device-plugin path, and what the node advertises now."""
        try:
            allocatable = (core.read_node(self.name).status.allocatable or {}).get(resource)
        except ApiException as error:
            allocatable = f"unreadable: {error.status} {error.reason}"
        return {
            "node": self.name,
            "served_by": REAL_DEVICE_PLUGIN if self.real else STAND_IN,
            "allocatable": allocatable,
            "image": self.image,
            "tolerations": list(self.tolerations),
        }


def tolerations_of(node: client.V1Node) -> tuple[Manifest, ...]:
    """Tolerations of a node's NoSchedule and NoExecute taints, leaving out condition taints."""
    return tuple(
        {"key": taint.key, "operator": "Exists", "effect": taint.effect}
        for taint in node.spec.taints or []
        if taint.effect in ("NoSchedule", "NoExecute") and not taint.key.startswith(CONDITION_TAINT_PREFIX)
    )


def now() -> str:
    """The current time, for records."""
    return datetime.now(UTC).isoformat(timespec="seconds")


class ExtendedResourceRehearsal:
    """Workloads asking for an extended resource, observed on both paths."""

    def __init__(self, api_client: client.ApiClient, setup: RehearsalSetup, timeouts: Timeouts) -> None:
        """Work in `setup.namespace` through `api_client`."""
        self.setup, self.timeouts = setup, timeouts
        self.core = client.CoreV1Api(api_client)
        self.objects = client.CustomObjectsApi(api_client)
        self.group, self.version = RESOURCE_API.split("/")
        self.plugin = PluginNode.read(self.core, setup.plugin_node)

    def device_plugin_facts(self) -> dict[str, Any]:
        """Which device-plugin path the rehearsal uses (real device plugin or stand-in), for every phase record."""
        return self.plugin.describe(self.core, self.setup.resource)

    # --- what serves the resource ------------------------------------------------------------------------------

    def serving_classes(self) -> list[str]:
        """DeviceClasses that let DRA serve the resource."""
        listed = self.objects.list_cluster_custom_object(self.group, self.version, "deviceclasses")["items"]
        return sorted(
            c["metadata"]["name"] for c in listed if c["spec"].get("extendedResourceName") == self.setup.resource
        )

    def create_class(self) -> str:
        """A DeviceClass for the driver under test that serves the resource (the change a rollout makes)."""
        name = f"{self.setup.namespace}-extended"
        selector = {"cel": {"expression": f'device.driver == "{self.setup.driver}"'}}
        body = {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"extendedResourceName": self.setup.resource, "selectors": [selector]},
        }
        self.objects.create_cluster_custom_object(self.group, self.version, "deviceclasses", body)
        return name

    def delete_class(self, name: str) -> None:
        """Remove a DeviceClass (the rollback)."""
        try:
            self.objects.delete_cluster_custom_object(self.group, self.version, "deviceclasses", name)
        except ApiException as error:
            if error.status != 404:
                raise

    def advertise(self, node: str, count: int) -> None:
        """Advertise the resource in a fake node's status, as a device plugin would through the kubelet."""
        quantity = {self.setup.resource: str(count)}
        self.core.patch_node_status(node, {"status": {"capacity": quantity, "allocatable": quantity}})

    def withdraw(self, node: str) -> None:
        """Remove the resource from a fake node's status."""
        gone = {self.setup.resource: None}
        self.core.patch_node_status(node, {"status": {"capacity": gone, "allocatable": gone}})

    # --- workloads ---------------------------------------------------------------------------------------------

    def on_real_plugin_node(self, node: str | None) -> bool:
        """Whether a pod on `node` runs on the real device plugin's node (then it must become Ready)."""
        return self.plugin.real and node == self.plugin.name

    def start(self, name: str, node: str) -> None:
        """A pod asking for one unit of the resource, pinned to `node` (tolerating it, on the real plugin node)."""
        quantity = {self.setup.resource: "1"}
        container: Manifest = {
            "name": "app",
            "image": PAUSE_IMAGE,
            "resources": {"requests": quantity, "limits": quantity},
        }
        spec: Manifest = {
            "terminationGracePeriodSeconds": TEST_POD_GRACE_SECONDS,
            "affinity": pin_to_node(node),
            "containers": [container],
        }
        if self.on_real_plugin_node(node):
            container.update(image=self.plugin.image, imagePullPolicy="IfNotPresent")
            if self.plugin.shell:
                container["command"] = PRINT_ENV_AND_WAIT
            spec["tolerations"] = list(self.plugin.tolerations)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.setup.namespace}}
        self.core.create_namespaced_pod(self.setup.namespace, {**pod, "spec": spec})

    def place(self, *workloads: tuple[str, str]) -> list[dict[str, Any]]:
        """Start each (name, node) workload, wait until the scheduler decided each, and observe them in order."""
        for name, node in workloads:
            self.start(name, node)
        for name, node in workloads:
            self.await_decided(name)
            if self.on_real_plugin_node(node):
                self.await_running(name)
        return [self.observe(name) for name, _ in workloads]

    def await_running(self, name: str) -> None:
        """Wait until a pod on the real plugin node is Ready and, with a shell, has shown its devices.

        A pod that does not get there is reported by the phase (its observation says not ready), not here.
        """
        try:
            waits.until(
                lambda: self.observe(name),
                lambda seen: bool(seen.get("ready")) and (not self.plugin.shell or seen.get("devices") is not None),
                timeout=self.timeouts.pod_running,
                what=f"pod {name} Ready on {self.plugin.name}"
                + (f" with {DEVICE_IDS_ENV} in its output" if self.plugin.shell else ""),
                describe=str,
            )
        except WaitTimeout:
            pass  # the observation the phase takes next carries what was seen

    def devices_of(self, name: str) -> str | None:
        """The device ids a container on the real plugin node printed (DEVICE_IDS_ENV), or None before it did."""
        try:
            text = self.core.read_namespaced_pod_log(name, self.setup.namespace, container="app", _request_timeout=10)
        except ApiException:
            return None  # not started yet, or gone: the observation says which
        prefix = f"{DEVICE_IDS_ENV}="
        return next((line[len(prefix) :] for line in str(text).splitlines() if line.startswith(prefix)), None)

    def read(self, name: str) -> client.V1Pod | None:
        """The pod, or None once it is gone."""
        try:
            return self.core.read_namespaced_pod(name, self.setup.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def await_decided(self, name: str) -> client.V1Pod:
        """The pod once the scheduler bound it or found it unschedulable."""
        pod: client.V1Pod = waits.until(
            functools.partial(self.core.read_namespaced_pod, name, self.setup.namespace),
            lambda p: (
                p.spec.node_name is not None
                or (scheduled_condition(p) is not None and scheduled_condition(p).status == "False")
            ),
            timeout=self.timeouts.pod_scheduled,
            what=f"pod {name} bound or found unschedulable",
            describe=describe_pod,
        )
        return pod

    def observe(self, name: str) -> dict[str, Any]:
        """Where the pod is and which path serves it: facts for the record."""
        pod = self.read(name)
        if pod is None:
            return {"name": name, "present": False}
        claim_status = pod.status.extended_resource_claim_status
        real = self.on_real_plugin_node(pod.spec.node_name)
        return {
            "name": name,
            "present": True,
            "uid": pod.metadata.uid,
            "node": pod.spec.node_name,
            "deleting": pod.metadata.deletion_timestamp is not None,
            "path": DRA if claim_status is not None else (DEVICE_PLUGIN if pod.spec.node_name else None),
            "claim": claim_status.resource_claim_name if claim_status is not None else None,
            "ready": pod_ready(pod),
            # On the real plugin node the pod must run; with a shell it shows the devices the plugin allocated.
            "must_run": real,
            "devices": self.devices_of(name) if real and self.plugin.shell and pod_ready(pod) else None,
            "scheduling": f"{scheduled_condition(pod).reason}: {scheduled_condition(pod).message}"
            if scheduled_condition(pod) is not None and pod.spec.node_name is None
            else None,
        }

    def claim(self, name: str) -> Manifest | None:
        """A claim of the rehearsal's namespace, or None."""
        try:
            found: Manifest = self.objects.get_namespaced_custom_object(
                self.group, self.version, self.setup.namespace, "resourceclaims", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def claims(self) -> list[Manifest]:
        """Every claim in the rehearsal's namespace."""
        listed = self.objects.list_namespaced_custom_object(
            self.group, self.version, self.setup.namespace, "resourceclaims"
        )
        return list(listed["items"])

    def delete_pod(self, name: str) -> None:
        """Delete a pod and wait until it is gone."""
        try:
            self.core.delete_namespaced_pod(name, self.setup.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
        waits.until(
            lambda: self.read(name),
            lambda pod: pod is None,
            timeout=self.timeouts.delete,
            what=f"pod {name} gone",
            describe=lambda pod: describe_pod(pod) if pod is not None else "gone",
        )

    def measure_path(self, prefix: str, node: str, samples: int) -> dict[str, Any]:
        """Creation-to-Ready seconds of `samples` pods on `node`, one at a time, and how many never got there.

        The same workload on both paths (one unit of the resource), for the canary verdict: DRA must not be worse
        than the device plugin it replaces. Each pod is deleted before the next, so one device is enough.
        """
        seconds: list[float] = []
        failures: list[str] = []
        for index in range(samples):
            name = f"{prefix}-{index}"
            start = time.monotonic()
            self.start(name, node)
            try:
                waits.until(
                    functools.partial(self.core.read_namespaced_pod, name, self.setup.namespace),
                    pod_ready,
                    timeout=self.timeouts.pod_scheduled,
                    what=f"baseline pod {name} Ready on {node}",
                    describe=describe_pod,
                )
                seconds.append(time.monotonic() - start)
            except WaitTimeout as error:
                failures.append(str(error))
            self.delete_pod(name)
        return {
            "node": node,
            "kubelet": "fake (kwok)" if _kwok(self.core.read_node(node)) else "real",
            "samples": samples,
            "ready_p50_seconds": round(percentile(seconds, 0.5), 3) if seconds else None,
            "ready_p95_seconds": round(percentile(seconds, 0.95), 3) if seconds else None,
            "failures": len(failures),
            "failure_reasons": failures,
        }

    # --- what a rollback leaves --------------------------------------------------------------------------------

    def left_behind(self) -> list[str]:
        """Pods that still hold claims of a class that no longer serves the resource, and orphaned claims.

        The claim of a pod deleted a moment ago goes only once the claim controller has seen the pod go (it removes
        the reservation, then the claim): orphans are waited for, up to the delete deadline, before they count.
        """
        found = []
        serving = self.serving_classes()
        pods = self.core.list_namespaced_pod(self.setup.namespace).items
        holders = {}
        for pod in pods:
            status = pod.status.extended_resource_claim_status
            if status is not None:
                holders[status.resource_claim_name] = pod.metadata.name
                if not serving:
                    found.append(
                        f"pod {pod.metadata.name} still holds claim {status.resource_claim_name} of "
                        f"{self.setup.resource} through DRA, but no DeviceClass serves {self.setup.resource} any more "
                        "(the class was removed before its pods were drained)"
                    )
        try:
            orphans = waits.until(
                lambda: self._orphaned_claims(set(holders)),
                lambda left: not left,
                timeout=self.timeouts.delete,
                what=f"claims of {self.setup.resource} whose pods are gone deleted",
                describe=lambda left: [claim["metadata"]["name"] for claim in left],
            )
        except WaitTimeout:
            orphans = self._orphaned_claims(set(holders))
        for claim in orphans:
            allocated = bool((claim.get("status") or {}).get("allocation"))
            finalizers = claim["metadata"].get("finalizers") or []
            found.append(
                f"claim {claim['metadata']['name']} of {self.setup.resource} outlives its pod (allocated={allocated}, "
                f"finalizers={finalizers}, after {self.timeouts.delete:g} s)"
            )
        return found

    def _orphaned_claims(self, held: set[str]) -> list[dict[str, Any]]:
        """The scheduler's extended-resource claims no pod of `held` names."""
        return [
            claim
            for claim in self.claims()
            if (claim["metadata"].get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
            and claim["metadata"]["name"] not in held
        ]

    def teardown(self) -> list[str]:
        """Delete every workload, wait for their claims to go, withdraw a stand-in; what would not go."""
        for pod in self.core.list_namespaced_pod(self.setup.namespace).items:
            self.delete_pod(pod.metadata.name)
        try:
            remaining = waits.until(
                self.claims,
                lambda claims: not claims,
                timeout=self.timeouts.delete,
                what=f"every claim of namespace {self.setup.namespace} gone after its pods",
                describe=lambda claims: [c["metadata"]["name"] for c in claims],
            )
        except WaitTimeout:  # claims left are a finding, reported below
            remaining = self.claims()
        if self.setup.advertised_by_suite:
            self.withdraw(self.setup.plugin_node)
        return [
            f"claim {c['metadata']['name']} left after every pod was deleted "
            f"(finalizers={c['metadata'].get('finalizers') or []})"
            for c in remaining
        ]


# --- the phases ----------------------------------------------------------------------------------------------------


def _expect_path(record: PhaseRecord, seen: dict[str, Any], path: str, why: str) -> None:
    if not seen.get("present") or seen.get("deleting"):
        record.problems.append(f"pod {seen['name']} is gone or being deleted ({why}): {seen}")
    elif seen.get("path") != path:
        record.problems.append(f"pod {seen['name']} is served by {seen.get('path')}, expected {path} ({why}): {seen}")
    elif seen.get("must_run") and not seen.get("ready"):
        record.problems.append(f"pod {seen['name']} is not Ready on the real device plugin's node ({why}): {seen}")


# What a kept workload must still show: the same pod, node and path, and the same devices where it showed them.
KEPT_FIELDS = ("uid", "node", "path", "devices")


def _kept(record: PhaseRecord, before: dict[str, Any], now_seen: dict[str, Any]) -> None:
    """A workload of an earlier phase is the same pod, on the same node and path, with the same devices."""
    same = {k: now_seen.get(k) for k in KEPT_FIELDS} == {k: before.get(k) for k in KEPT_FIELDS}
    stopped = bool(before.get("ready")) and not now_seen.get("ready")
    if not same or now_seen.get("deleting") or stopped:
        record.problems.append(f"workload {before['name']} did not keep its device: was {before}, now {now_seen}")


def run_before(rehearsal: ExtendedResourceRehearsal) -> PhaseRecord:
    """Device-plugin path only: nothing lets DRA serve the resource; a workload gets it from the device plugin."""
    record = PhaseRecord(Phase.BEFORE, now())
    start = time.monotonic()
    record.facts["setup"] = asdict(rehearsal.setup)
    record.facts["device_plugin"] = rehearsal.device_plugin_facts()
    serving = rehearsal.serving_classes()
    if serving:
        record.problems.append(f"DeviceClasses {serving} already serve {rehearsal.setup.resource} through DRA")
    (seen,) = rehearsal.place(("w1-device-plugin", rehearsal.setup.plugin_node))
    _expect_path(record, seen, DEVICE_PLUGIN, "the device plugin's node, before the change")
    record.facts["workloads"] = {"w1": seen}
    record.seconds = round(time.monotonic() - start, 3)
    return record


def run_after_change(
    rehearsal: ExtendedResourceRehearsal, state: RehearsalState, *, drive: bool, samples: int = BASELINE_SAMPLES
) -> PhaseRecord:
    """DRA serves the resource where no device plugin does; device-plugin nodes and running workloads are unchanged."""
    before = state.require(Phase.AFTER_CHANGE, Phase.BEFORE)
    record = PhaseRecord(Phase.AFTER_CHANGE, now())
    start = time.monotonic()
    record.facts["device_plugin"] = rehearsal.device_plugin_facts()
    if drive:
        record.facts["created_class"] = rehearsal.create_class()
    serving = rehearsal.serving_classes()
    record.facts["serving_classes"] = serving
    if not serving:
        record.problems.append(f"no DeviceClass has extendedResourceName {rehearsal.setup.resource}: no change made")
    _kept(record, before.facts["workloads"]["w1"], rehearsal.observe("w1-device-plugin"))
    w2, w3 = rehearsal.place(("w2-dra", rehearsal.setup.dra_node), ("w3-device-plugin", rehearsal.setup.plugin_node))
    _expect_path(record, w2, DRA, "a node of the driver that does not advertise the resource")
    _expect_path(record, w3, DEVICE_PLUGIN, "a node that advertises the resource is not served by DRA")
    claim = rehearsal.claim(w2["claim"]) if w2.get("claim") else None
    results = ((claim or {}).get("status") or {}).get("allocation", {}).get("devices", {}).get("results") or []
    if w2.get("path") == DRA and not any(r.get("driver") == rehearsal.setup.driver for r in results):
        record.problems.append(f"claim {w2.get('claim')} of w2 is not allocated by {rehearsal.setup.driver}: {results}")
    record.facts["workloads"] = {"w1": rehearsal.observe("w1-device-plugin"), "w2": w2, "w3": w3}
    record.seconds = round(time.monotonic() - start, 3)
    if serving:
        record.facts["baseline"] = {
            DEVICE_PLUGIN: rehearsal.measure_path(baseline_prefix(DEVICE_PLUGIN), rehearsal.setup.plugin_node, samples),
            DRA: rehearsal.measure_path(baseline_prefix(DRA), rehearsal.setup.dra_node, samples),
        }
    return record


def run_after_rollback(
    rehearsal: ExtendedResourceRehearsal, state: RehearsalState, *, drive: bool, drain_first: bool = True
) -> PhaseRecord:
    """Back to the device plugin: no class serves the resource, nothing DRA made is left, device-plugin pods kept.

    Driving it, the suite drains the pods DRA serves and then removes the class it created; `drain_first=False`
    is the broken order (class first), which this phase must report.
    """
    changed = state.require(Phase.AFTER_ROLLBACK, Phase.AFTER_CHANGE)
    record = PhaseRecord(Phase.AFTER_ROLLBACK, now())
    start = time.monotonic()
    record.facts["device_plugin"] = rehearsal.device_plugin_facts()
    if drive:
        created = changed.facts.get("created_class")
        if drain_first:
            rehearsal.delete_pod("w2-dra")
        if created:
            rehearsal.delete_class(created)
    serving = rehearsal.serving_classes()
    if serving:
        record.problems.append(f"DeviceClasses {serving} still serve {rehearsal.setup.resource}: not rolled back")
    kept = {key: rehearsal.observe(name) for key, name in (("w1", "w1-device-plugin"), ("w3", "w3-device-plugin"))}
    for key, seen in kept.items():
        _kept(record, changed.facts["workloads"][key], seen)
    record.left_behind.extend(rehearsal.left_behind())
    w4, w5 = rehearsal.place(
        ("w4-device-plugin", rehearsal.setup.plugin_node), ("w5-former-dra", rehearsal.setup.dra_node)
    )
    _expect_path(record, w4, DEVICE_PLUGIN, "the device plugin's node after the rollback")
    if not serving and w5.get("node") is not None:
        record.problems.append(f"pod w5 was placed on {w5['node']}, which serves {rehearsal.setup.resource} no more")
    record.facts["workloads"] = {**kept, "w4": w4, "w5": w5}
    record.seconds = round(time.monotonic() - start, 3)
    return record


def _allocatable(node: client.V1Node, resource: str) -> int:
    value = (node.status.allocatable or {}).get(resource)
    return int(value) if value is not None and str(value).isdigit() else 0


def _kwok(node: client.V1Node) -> bool:
    return bool((node.metadata.annotations or {}).get(KWOK_NODE_ANNOTATION))


def choose_nodes(
    api_client: client.ApiClient, driver: str, resource: str, known: Sequence[str]
) -> tuple[str, str, bool] | str:
    """(device-plugin node, DRA node, whether to advertise on the former), or why the rehearsal cannot run.

    The device-plugin node is, in this order: a node whose kubelet advertises the resource (a real device plugin;
    its own taints are tolerated, condition taints rule it out), an untainted node that advertises it, else a
    fake (kwok) node on which the suite advertises it. The DRA node is another untainted node with ResourceSlices
    of the driver under test that does not advertise the resource. Candidates are the `known` nodes (the ones the
    backend describes) and the driver's: the cluster's node list is not read, its cost grows with the cluster.
    """
    core = client.CoreV1Api(api_client)
    objects = client.CustomObjectsApi(api_client)
    group, version = RESOURCE_API.split("/")
    slices = objects.list_cluster_custom_object(
        group, version, "resourceslices", field_selector=f"spec.driver={driver}"
    )
    driver_nodes = {s["spec"].get("nodeName") for s in slices["items"]} - {None}
    listed = named_nodes(core, {*known, *driver_nodes})
    schedulable = [n for n in listed if not n.spec.unschedulable]
    usable = [n for n in schedulable if not n.spec.taints]
    kubelets = sorted(
        n.metadata.name
        for n in schedulable
        if not _kwok(n)
        and _allocatable(n, resource) > 0
        and not any(t.key.startswith(CONDITION_TAINT_PREFIX) for t in n.spec.taints or [])
    )
    advertising = [n.metadata.name for n in usable if _allocatable(n, resource) > 0 and n.metadata.name not in kubelets]
    fake = [n.metadata.name for n in usable if _kwok(n)]
    dra_nodes = sorted(n.metadata.name for n in usable if n.metadata.name in driver_nodes)
    every_advertising = {n.metadata.name for n in listed if _allocatable(n, resource) > 0}
    candidates = [(n, False) for n in [*kubelets, *advertising]] + [(n, True) for n in reversed(fake)]
    for plugin_node, advertise in candidates:
        others = [n for n in dra_nodes if n != plugin_node and n not in every_advertising]
        if others:
            return plugin_node, others[0], advertise
    return (
        f"needs a node that advertises {resource} (or a fake node to advertise it on) and another untainted node "
        f"with devices of {driver}; advertising through a kubelet: {kubelets}, advertising: {advertising}, "
        f"fake: {fake}, {driver}: {dra_nodes}"
    )
