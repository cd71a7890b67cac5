"""Rolling metrics.k8s.io/v1 back (v1beta1 only) and forward again: the change, and the checks that judge it.

Shared by the metrics suite's rollback check and the rollback rehearsal's metrics phases, so both judge a
rollback the same way: nothing of the removed version lingers (APIService, discovery, the path answering), the
kept version is Available and answers, and consumers keep working: a reader of named nodes, and an HPA-style read
(PodMetrics of one namespace by label selector, what the HPA controller asks for).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.metrics.adapter import wait_serving

# Reads of both versions within one collection tick: two intervals of the slowest common setting (15 s) at most.
SAME_TICK_DEADLINE = 30.0
# APIService metadata a restored copy keeps (the rest is the server's: uid, resourceVersion, managedFields).
KEPT_METADATA = ("name", "labels", "annotations")


def apiservice_name(version: str) -> str:
    """The APIService that registers one version of metrics.k8s.io."""
    return f"{version}.{metrics_reads.GROUP}"


def saved_apiservice(admin: client.ApiClient, version: str) -> dict[str, Any]:
    """The APIService of `version` as a manifest that can be created again after a rollback."""
    registration = client.ApiregistrationV1Api(admin)
    saved: dict[str, Any] = admin.sanitize_for_serialization(registration.read_api_service(apiservice_name(version)))
    saved["metadata"] = {k: v for k, v in saved["metadata"].items() if k in KEPT_METADATA}
    saved.pop("status", None)
    return saved


def group_apiservices(admin: client.ApiClient) -> dict[str, str]:
    """Every APIService of metrics.k8s.io by name, with its Available condition ("True/Passed")."""
    found = {}
    for service in client.ApiregistrationV1Api(admin).list_api_service().items:
        if service.spec is None or service.spec.group != metrics_reads.GROUP:
            continue
        conditions = (service.status.conditions if service.status else None) or []
        condition = next((c for c in conditions if c.type == "Available"), None)
        found[service.metadata.name] = f"{condition.status}/{condition.reason}" if condition else "no condition"
    return dict(sorted(found.items()))


def remove_version(admin: client.ApiClient, metrics_client: client.ApiClient, version: str, timeout: float) -> None:
    """Stop serving `version`: delete its APIService and wait until discovery no longer lists it."""
    try:
        client.ApiregistrationV1Api(admin).delete_api_service(apiservice_name(version))
    except ApiException as error:
        if error.status != 404:  # already gone: the staging team removed it itself, wait for discovery all the same
            raise
    waits.until(
        lambda: metrics_reads.served_versions(metrics_client),
        lambda served: version not in served,
        timeout=timeout,
        what=f"{metrics_reads.GROUP}/{version} gone from discovery",
        describe=str,
    )


def restore_version(
    admin: client.ApiClient,
    metrics_client: client.ApiClient,
    manifest: dict[str, Any],
    timeout: float,
    *,
    wait: bool = True,
) -> None:
    """Serve a removed version again from its saved APIService; wait until every version is served and found.

    Without `wait` only the APIService is created: for versions that were not serving before the change either,
    waiting for them would only run out the deadline.
    """
    try:
        client.ApiregistrationV1Api(admin).create_api_service(manifest)
    except ApiException as error:
        if error.status != 409:  # already there again: someone else restored it, wait for it all the same
            raise
    if wait:
        wait_serving(metrics_client, metrics_reads.VERSIONS, timeout)


def rolled_back_problems(
    admin: client.ApiClient, metrics_client: client.ApiClient, removed: str = "v1", kept: str = "v1beta1"
) -> list[str]:
    """What shows that `removed` is not cleanly gone, or that `kept` stopped serving."""
    problems = []
    try:
        service = client.ApiregistrationV1Api(admin).read_api_service(apiservice_name(removed))
        problems.append(
            f"APIService {service.metadata.name} lingers: {version_availability.apiservice_condition(admin, removed)}"
        )
    except ApiException as error:
        if error.status != 404:
            raise
    served = metrics_reads.served_versions(metrics_client)
    if removed in served:
        problems.append(f"discovery still lists {metrics_reads.GROUP}/{removed}: {served}")
    # The version's resource list, not its NodeMetrics list: one that lingers would answer with every node.
    status = metrics_reads.get_status(metrics_client, f"/apis/{metrics_reads.GROUP}/{removed}")
    if status != 404:
        problems.append(f"GET /apis/{metrics_reads.GROUP}/{removed} answered {status}, expected 404")
    condition = version_availability.apiservice_condition(admin, kept)
    if not condition.startswith("True"):
        problems.append(f"{kept}.{metrics_reads.GROUP} Available: {condition}")
    return problems


def hpa_style_read(
    metrics_client: client.ApiClient, version: str, namespace: str, selector: dict[str, str]
) -> list[metrics_sampling.Sample]:
    """PodMetrics of one namespace by label selector, as the HPA controller reads them; ApiException if refused."""
    label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    path = f"/apis/{metrics_reads.GROUP}/{version}/namespaces/{namespace}/pods"
    status, body = metrics_reads.get_json(metrics_client, path, {"labelSelector": label_selector})
    if status != 200:
        raise ApiException(status=status, reason=f"GET {path}?labelSelector={label_selector}: {body}")
    items = [item for item in body.get("items", []) if _matches(item, selector)]
    return [metrics_sampling.parse_sample("pod", item) for item in items]


def _matches(item: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = (item.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def consumer_problems(
    metrics_client: client.ApiClient,
    version: str,
    target: tuple[str, dict[str, str]] | None,
    slo: float,
    scope: metrics_sampling.SampleScope,
) -> list[str]:
    """What a consumer of `version` would miss: a node reader's samples (of `scope`), an HPA's pod samples.

    `target` is (namespace, labels) of running pods the HPA-style read must find; a sample older than `slo` or
    reporting zero use is a problem (missing or stale data is never read as zero).
    """
    problems = []
    try:
        found = metrics_sampling.samples(metrics_client, version, scope)
        if not any(key.startswith("node/") for key in found):
            problems.append(f"a node reader of {version} gets no NodeMetrics of {list(scope.nodes)}")
    except ApiException as error:
        problems.append(f"a node reader of {version} is refused: {error.status} {error.reason}")
    if target is None:
        return problems
    namespace, labels = target
    try:
        pods = hpa_style_read(metrics_client, version, namespace, labels)
    except ApiException as error:
        return [*problems, f"an HPA-style read of {version} is refused: {error.status} {error.reason}"]
    if not pods:
        problems.append(f"an HPA-style read of {version} in {namespace} ({labels}) finds no PodMetrics")
    now = metrics_reads.utc_now()
    for sample in pods:
        age = (now - sample.timestamp).total_seconds()
        if age > slo:
            problems.append(f"HPA-style read of {version}: {sample.key} is {age:.0f} s old (SLO {slo:g} s)")
        if sample.cpu_millicores == 0 and sample.memory_bytes == 0:
            problems.append(f"HPA-style read of {version}: {sample.key} reports zero use")
    return problems


def in_one_tick(first: dict[str, metrics_sampling.Sample], second: dict[str, metrics_sampling.Sample]) -> bool:
    """Whether two versions' reads are of the same objects, each object's two reads of the same sample.

    Per object, not over the read: objects are read one after the other, so a tick that falls between one object's
    two reads leaves both versions with the same set of timestamps while that object's two samples differ.
    """
    # Same objects too: pods other tests create or delete between the two reads are churn, not disagreement.
    if set(first) != set(second):
        return False
    return all(first[key].timestamp == second[key].timestamp for key in first)


def read_in_one_tick(
    metrics_client: client.ApiClient, scope: metrics_sampling.SampleScope, first: str = "v1", second: str = "v1beta1"
) -> tuple[dict[str, metrics_sampling.Sample], dict[str, metrics_sampling.Sample]]:
    """Both versions' samples in `scope`, read within one collection tick and over the same objects where possible.

    Each object is read from both versions back to back; still, a tick can fall between two reads, and a pod can
    go between them; a real disagreement persists past the deadline and is then compared as read.
    """

    def pair() -> tuple[dict[str, metrics_sampling.Sample], dict[str, metrics_sampling.Sample]]:
        read = metrics_sampling.samples_of_versions(metrics_client, (first, second), scope)
        return read[first], read[second]

    try:
        return waits.until(
            pair,
            lambda read: in_one_tick(*read),
            timeout=SAME_TICK_DEADLINE,
            what=f"{first} and {second} read in one tick",
        )
    except WaitTimeout:
        return pair()  # never in one tick: the comparison then names the timestamps that differ


def parity_problems(metrics_client: client.ApiClient, scope: metrics_sampling.SampleScope) -> list[str]:
    """Where v1 and v1beta1 disagree on the samples in `scope` while both are served."""
    first, second = read_in_one_tick(metrics_client, scope)
    return metrics_sampling.parity_differences(first, second, metrics_sampling.PARITY_TOLERANCE)
