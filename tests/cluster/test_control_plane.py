"""The cluster the suites run on is a real Kubernetes 1.37 control plane with DRA wired end to end."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance import versions
from dra_conformance.kube import waits
from dra_conformance.kube.builders import Builder
from dra_conformance.kube.client import status_message
from dra_conformance.kube.identities import anonymous_client, request_token, token_client
from dra_conformance.kube.pods import describe_pod, scheduled_condition
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.timeouts import Timeouts


@pytest.fixture
def build(namespace: str) -> Builder:
    # Driver names are DNS subdomains of at most 63 bytes; the namespace suffix makes them unique per test.
    return Builder(namespace=namespace, driver=f"gpu-{namespace.rsplit('-', 1)[1]}.example.com")


def _pod(api_client: client.ApiClient, namespace: str, name: str) -> client.V1Pod:
    return client.CoreV1Api(api_client).read_namespaced_pod(name, namespace)


def test_version_endpoint_reports_pinned_kubernetes(api_client: client.ApiClient) -> None:
    info = client.VersionApi(api_client).get_code()
    assert info.git_version == versions.KUBERNETES, f"/version says {info.git_version}, {info}"


def test_anonymous_request_is_denied(api_client: client.ApiClient) -> None:
    with anonymous_client(api_client) as anonymous, pytest.raises(ApiException) as denied:
        client.CoreV1Api(anonymous).list_namespace()
    message = status_message(denied.value)
    assert denied.value.status == 403, f"anonymous list namespaces: HTTP {denied.value.status}: {message}"
    assert 'User "system:anonymous" cannot list resource "namespaces"' in message, message


def test_service_account_without_rbac_cannot_create_resourceclaim(
    api_client: client.ApiClient, namespace: str, build: Builder
) -> None:
    client.CoreV1Api(api_client).create_namespaced_service_account(namespace, {"metadata": {"name": "no-rbac"}})
    token = request_token(api_client, namespace, "no-rbac")
    with token_client(api_client, token) as as_sa, pytest.raises(ApiException) as denied:
        client.ResourceV1Api(as_sa).create_namespaced_resource_claim(namespace, build.claim("any-class"))
    message = status_message(denied.value)
    assert denied.value.status == 403, f"expected 403, got {denied.value.status}: {message}"
    expected = f'User "system:serviceaccount:{namespace}:no-rbac" cannot create resource "resourceclaims"'
    assert expected in message, message


def test_discovery_lists_resource_api_v1_and_enabled_betas(api_client: client.ApiClient) -> None:
    groups = client.ApisApi(api_client).get_api_versions().groups
    resource = next((g for g in groups if g.name == "resource.k8s.io"), None)
    assert resource is not None, f"resource.k8s.io missing from discovery: {[g.name for g in groups]}"
    served = {v.version for v in resource.versions}
    enabled = {key.split("/")[1] for key, on in versions.RUNTIME_CONFIG[versions.minor()].items() if on}
    assert {"v1", *enabled} <= served, f"served resource.k8s.io versions: {sorted(served)}"
    assert resource.preferred_version.version == "v1", f"preferred: {resource.preferred_version.version}"


def test_scheduler_allocates_a_published_device_and_binds_the_pod(
    api_client: client.ApiClient,
    cluster: ClusterInfo,
    tracker: ResourceTracker,
    build: Builder,
    timeouts: Timeouts,
) -> None:
    node = cluster.nodes[0]
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    published = tracker.create(build.resource_slice(node, devices=1))
    claim = tracker.create(build.claim(device_class))
    pod = tracker.create(build.pod(claim=claim["metadata"]["name"]))

    bound = waits.until(
        lambda: _pod(api_client, build.namespace, pod["metadata"]["name"]),
        lambda p: bool(p.spec.node_name),
        timeout=timeouts.pod_scheduled,
        what="pod bound to a node",
        describe=describe_pod,
    )
    assert bound.spec.node_name == node, describe_pod(bound)

    allocated = tracker.get("resource.k8s.io/v1", "ResourceClaim", claim["metadata"]["name"], build.namespace)
    status = allocated.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    assert [(r["driver"], r["pool"], r["device"]) for r in results] == [
        (build.driver, published["spec"]["pool"]["name"], "dev-0")
    ], f"allocation results: {results}"
    terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert any(f.get("values") == [node] for term in terms for f in term.get("matchFields") or []), terms
    reserved = [r["name"] for r in status.get("reservedFor") or []]
    assert reserved == [pod["metadata"]["name"]], f"reservedFor: {status.get('reservedFor')}"


def test_pod_asking_for_more_devices_than_exist_stays_unschedulable(
    api_client: client.ApiClient,
    cluster: ClusterInfo,
    tracker: ResourceTracker,
    build: Builder,
    timeouts: Timeouts,
) -> None:
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    tracker.create(build.resource_slice(cluster.nodes[0], devices=2))
    claim = tracker.create(build.claim(device_class, count=3))
    pod = tracker.create(build.pod(claim=claim["metadata"]["name"]))
    name = pod["metadata"]["name"]

    def unschedulable(p: client.V1Pod) -> bool:
        condition = scheduled_condition(p)
        return condition is not None and condition.status == "False" and condition.reason == "Unschedulable"

    pending = waits.until(
        lambda: _pod(api_client, build.namespace, name),
        unschedulable,
        timeout=timeouts.pod_scheduled,
        what="PodScheduled=False/Unschedulable",
        describe=describe_pod,
    )
    assert pending.status.phase == "Pending" and not pending.spec.node_name, describe_pod(pending)

    core = client.CoreV1Api(api_client)
    events = waits.until(
        lambda: core.list_namespaced_event(build.namespace, field_selector=f"involvedObject.name={name}").items,
        lambda items: any(e.reason == "FailedScheduling" for e in items),
        timeout=timeouts.pod_scheduled,
        what=f"FailedScheduling event for {name}",
        describe=lambda items: [(e.reason, e.message) for e in items],
    )
    messages = [e.message for e in events if e.reason == "FailedScheduling"]
    assert any("cannot allocate all claims" in m for m in messages), f"FailedScheduling messages: {messages}"


def test_template_claim_is_generated_for_the_pod_and_deleted_with_it(
    api_client: client.ApiClient,
    cluster: ClusterInfo,
    tracker: ResourceTracker,
    build: Builder,
    timeouts: Timeouts,
) -> None:
    device_class = tracker.create(build.device_class())["metadata"]["name"]
    tracker.create(build.resource_slice(cluster.nodes[0], devices=1))
    template = tracker.create(build.claim_template(device_class))
    pod = tracker.create(build.pod(template=template["metadata"]["name"]))
    pod_name = pod["metadata"]["name"]
    resource = client.ResourceV1Api(api_client)

    def generated_claim(p: client.V1Pod) -> str | None:
        statuses = p.status.resource_claim_statuses or []
        return next((s.resource_claim_name for s in statuses if s.name == "devices"), None)

    with_claim = waits.until(
        lambda: _pod(api_client, build.namespace, pod_name),
        lambda p: bool(generated_claim(p)),
        timeout=timeouts.claim_generated,
        what="generated claim recorded in pod status",
        describe=lambda p: p.status.resource_claim_statuses,
    )
    claim_name = generated_claim(with_claim)
    assert claim_name is not None
    claim = resource.read_namespaced_resource_claim(claim_name, build.namespace)
    owners = [(o.kind, o.name, o.uid) for o in claim.metadata.owner_references or []]
    assert owners == [("Pod", pod_name, pod["metadata"]["uid"])], f"owners of {claim_name}: {owners}"

    tracker.delete(pod)

    def claim_state() -> str:
        try:
            left = resource.read_namespaced_resource_claim(claim_name, build.namespace)
        except ApiException as error:
            if error.status == 404:
                return "gone"
            raise
        return f"present, finalizers={left.metadata.finalizers}, reservedFor={left.status.reserved_for}"

    waits.until(
        claim_state,
        lambda s: s == "gone",
        timeout=timeouts.delete,
        what=f"generated claim {claim_name} deleted after its pod",
        describe=str,
    )
