"""Kubelet mode: on a node a real kubelet serves, the kubelet prepares claims and the suite only observes.

Every check pins its pods to a leased real node and looks through the API (pod status, events, logs), and where
this machine can see the node (the local backend) at the driver's CDI specs. Nothing here plays the kubelet.
The obligations are in `dra_conformance/model/registry/kubelet.yaml`.
"""

from __future__ import annotations

import json
from typing import Any

import allure
import pytest
import yaml
from kubernetes import client

from dra_conformance.driver.profile import Capability, DriverProfile
from dra_conformance.driver.real_node import CdiSpecFiles, RealNodeTarget, running_pod
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import RESOURCE_API, Builder, ClaimUse
from dra_conformance.kube.claims import device_statuses
from dra_conformance.kube.pods import describe_pod, pod_ready
from dra_conformance.kube.tracker import ResourceTracker, TrackedObject
from dra_conformance.kubelet.driver_pod import find_driver_pod, restart_driver_pod
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.timeouts import Timeouts

# The real node is one per machine and every kubelet-mode check leases it in turn: on one xdist worker they take
# turns without a lease wait that grows with the checks before it (the lease deadline timed out at 15 checks).
pytestmark = pytest.mark.xdist_group("real-node")


def _claim_of(tracker: ResourceTracker, namespace: str, name: str) -> dict[str, Any]:
    return tracker.get(RESOURCE_API, "ResourceClaim", name, namespace)


def _cdi_specs_naming(cdi: CdiSpecFiles, claim_uid: str) -> list[dict[str, Any]]:
    """The node's CDI specs that name the claim (in their file name or content)."""
    return [
        json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
        for path, text in cdi.naming(claim_uid).items()
    ]


def _injected_env(specs: list[dict[str, Any]]) -> set[str]:
    edits = [spec.get("containerEdits") or {} for spec in specs]
    edits += [device.get("containerEdits") or {} for spec in specs for device in spec.get("devices") or []]
    return {entry for edit in edits for entry in edit.get("env") or []}


def test_container_sees_the_environment_the_drivers_cdi_spec_injects(
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    if real_node.cdi_specs is None:
        pytest.skip(f"not applicable: the CDI spec directory of {real_node.name} is not readable from this machine")
    pod = running_pod(tracker, api_client, build, real_node, timeouts)
    claim_name = pod.spec.resource_claims[0].resource_claim_name
    claim_uid = _claim_of(tracker, namespace, claim_name)["metadata"]["uid"]
    specs = _cdi_specs_naming(real_node.cdi_specs, claim_uid)
    if not specs:
        dirs = [str(d) for d in real_node.cdi_specs.dirs]
        pytest.skip(f"not applicable: the driver wrote no CDI spec naming claim {claim_uid} in {dirs}")
    expected = _injected_env(specs)
    if not expected:
        pytest.skip("not applicable: the driver's CDI spec injects no environment (device nodes, mounts: not checked)")
    logs = client.CoreV1Api(api_client).read_namespaced_pod_log(pod.metadata.name, namespace)
    seen = set(logs.splitlines())
    allure.attach(logs, "container environment", allure.attachment_type.TEXT)
    missing = sorted(expected - seen)
    # The kubelet hands the CDI IDs of the prepare answer to the runtime for the claim's containers.
    obligations.check(
        "kubelet.container-sees-cdi-environment",
        not missing,
        f"lacks {missing} of the CDI spec of claim {claim_uid}; it saw: {sorted(seen)}",
        f"container of pod {pod.metadata.name} on {real_node.name}",
    )


def test_job_using_a_claim_on_a_real_node_completes(
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    template = tracker.create(build.claim_template(device_class))["metadata"]["name"]
    pod = build.pod_with(
        [ClaimUse("devices", template=template)],
        node=real_node.name,
        tolerations=real_node.tolerations,
        image=real_node.image,
        command=("sh", "-c", "true"),
    )
    job = tracker.create(build.job_with(pod))
    batch = client.BatchV1Api(api_client)
    where = f"job {job['metadata']['name']} on {real_node.name}"

    def state() -> client.V1JobStatus:
        return batch.read_namespaced_job_status(job["metadata"]["name"], namespace).status

    try:
        status = waits.until(
            state,
            lambda s: bool(s.succeeded) or bool(s.failed),
            timeout=timeouts.job_complete,
            what=f"job {job['metadata']['name']} finished",
            describe=lambda s: f"active={s.active} succeeded={s.succeeded} failed={s.failed}",
        )
    except WaitTimeout as error:
        events = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
        obligations.fail(
            "kubelet.job-with-a-claim-completes",
            f"{error}; events: {[f'{e.reason}: {e.message}' for e in events]}",
            where,
        )
    obligations.check("kubelet.job-with-a-claim-completes", status.succeeded == 1, f"failed: {status}", where)
    tracker.delete(TrackedObject.of(job))
    _await_no_pods(api_client, namespace, timeouts)


def _await_no_pods(api_client: client.ApiClient, namespace: str, timeouts: Timeouts) -> None:
    core = client.CoreV1Api(api_client)
    waits.until(
        lambda: [p.metadata.name for p in core.list_namespaced_pod(namespace).items],
        lambda left: not left,
        timeout=timeouts.delete,
        what=f"every pod of namespace {namespace} gone",
        describe=str,
    )


def test_driver_removes_its_status_entries_and_cdi_spec_once_a_deleted_pods_claim_is_unprepared(
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    namespace: str,
    timeouts: Timeouts,
    driver_profile: DriverProfile,
    obligations: Obligations,
) -> None:
    pod = running_pod(tracker, api_client, build, real_node, timeouts)
    claim_name = pod.spec.resource_claims[0].resource_claim_name
    claim = _claim_of(tracker, namespace, claim_name)
    uid = claim["metadata"]["uid"]
    cdi = real_node.cdi_specs
    had_spec = bool(cdi and _cdi_specs_naming(cdi, uid))
    tracker.delete(TrackedObject("v1", "Pod", pod.metadata.name, namespace))

    def entries() -> list[dict[str, Any]]:
        current = _claim_of(tracker, namespace, claim_name)
        return [e for e in device_statuses(current) if e["driver"] == build.driver]

    if driver_profile.declares(Capability.STATUS_DEVICES):
        try:
            left = waits.until(
                entries, lambda found: not found, timeout=timeouts.status_written, what="driver's entries removed"
            )
        except WaitTimeout:
            left = entries()
        # No rule obliges it; the API server drops entries of a deallocated claim anyway.
        obligations.check("kubelet.status-entries-removed-after-unprepare", not left, left, f"claim {claim_name}")
    if had_spec and cdi is not None:
        try:
            specs = waits.until(
                lambda: _cdi_specs_naming(cdi, uid),
                lambda found: not found,
                timeout=timeouts.status_written,
                what=f"CDI spec of claim {uid} removed",
            )
        except WaitTimeout:
            specs = _cdi_specs_naming(cdi, uid)
        obligations.check(
            "kubelet.cdi-spec-removed-after-unprepare",
            not specs,
            specs,
            f"claim {claim_name} ({uid}) on {real_node.name}",
        )


def test_driver_restarted_on_the_node_registers_again_and_serves_new_pods(
    real_node: RealNodeTarget,
    tracker: ResourceTracker,
    api_client: client.ApiClient,
    build: Builder,
    timeouts: Timeouts,
    obligations: Obligations,
    cluster: ClusterInfo,
) -> None:
    core = client.CoreV1Api(api_client)
    kubelet_root = real_node.layout.kubelet_root if real_node.layout is not None else None
    if kubelet_root is None and real_node.endpoint is not None:
        kubelet_root = real_node.endpoint.root_on_node
    driver_pod, found = (None, "the node's kubelet root is unknown")
    if kubelet_root is not None:
        driver_pod, found = find_driver_pod(core, real_node.name, kubelet_root, build.driver, cluster.driver_daemonsets)
    if driver_pod is None:
        # A driver outside the cluster's pods is a process the suite did not start: it is not ours to kill. (The
        # local backend runs the real node's driver as a DaemonSet pod, as clusters do.)
        pytest.skip(f"not applicable: the suite restarts a driver by deleting its DaemonSet pod; {found}")
    where = f"driver {build.driver} on {real_node.name}"
    with allure.step(f"delete the driver's pod {found}; its DaemonSet makes a new one"):
        try:
            restart_driver_pod(core, driver_pod, timeouts.pod_running)
        except WaitTimeout as error:
            obligations.fail("kubelet.driver-serves-after-restart", str(error), where)
    try:
        pod = running_pod(tracker, api_client, build, real_node, timeouts)
    except WaitTimeout as error:
        obligations.fail("kubelet.driver-serves-after-restart", f"a new pod with a claim: {error}", where)
    obligations.check("kubelet.driver-serves-after-restart", pod_ready(pod), describe_pod(pod), where)
