"""Samples of the Metrics API: NodeMetrics and PodMetrics of a few named objects, read, compared and aged."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from dra_conformance.errors import SuiteForbidden
from dra_conformance.kube import waits
from dra_conformance.metrics.reads import GROUP, get_json
from dra_conformance.model.stats import percentile

FORBIDDEN = 403
# Relative difference of usage values two versions may show for the same object at the same timestamp.
PARITY_TOLERANCE = 0.05


@dataclass(frozen=True)
class Sample:
    """One NodeMetrics or PodMetrics sample (pods summed over containers)."""

    kind: str
    key: str
    timestamp: datetime.datetime
    window: str
    cpu_millicores: float
    memory_bytes: float


def parse_sample(kind: str, item: dict[str, Any]) -> Sample:
    """A NodeMetrics ("node") or PodMetrics ("pod") item as a sample."""
    return _sample(kind, item)


def _sample(kind: str, item: dict[str, Any]) -> Sample:
    meta = item["metadata"]
    usages = [item["usage"]] if kind == "node" else [c["usage"] for c in item.get("containers", [])]
    return Sample(
        kind,
        meta["name"] if kind == "node" else f"{meta['namespace']}/{meta['name']}",
        datetime.datetime.fromisoformat(item["timestamp"].replace("Z", "+00:00")),
        item.get("window", ""),
        # Millicores and bytes; the client's parser knows every suffix (n, u, m, k, M, ..., Ki, ..., Pi, Ei).
        float(sum(parse_quantity(u.get("cpu", "0")) for u in usages) * 1000),
        float(sum(parse_quantity(u.get("memory", "0")) for u in usages)),
    )


# Nodes whose samples the checks judge: a few are enough to judge an implementation, and the count must not grow
# with the cluster (on 1,000 nodes a run reads what it reads on 4).
SCOPE_NODES = 4
# Running pods on those nodes whose samples the checks judge, at most, each read by name. Listing PodMetrics per
# namespace made the implementation list every pod of the namespace: bench/scale's unrelated workloads on the scoped
# nodes made those answers 28x larger at 1,000 nodes, and a production namespace can hold thousands of pods.
SCOPE_PODS = 16


@dataclass(frozen=True)
class SampleScope:
    """Which samples the checks read: NodeMetrics of a few named nodes, PodMetrics of a few Running pods on them.

    Every read selects by name or node, never the whole cluster or a namespace: neither the suite nor the
    implementation answering it (which lists what it is asked for) does more work on a larger cluster.
    """

    nodes: tuple[str, ...]

    @classmethod
    def of_cluster(cls, real_nodes: Sequence[str], nodes: Sequence[str]) -> SampleScope:
        """The real kubelets first (their samples are measured, not synthesized), then nodes in name order."""
        return cls(tuple(dict.fromkeys([*real_nodes, *sorted(nodes)]))[:SCOPE_NODES])

    def describe(self) -> str:
        """One line for messages: which samples were read."""
        return f"NodeMetrics of {list(self.nodes)} and PodMetrics of up to {SCOPE_PODS} Running pods on them"


def running_pods(api: client.ApiClient, nodes: Iterable[str]) -> set[str]:
    """The Running pods on `nodes` as "<namespace>/<name>" (one list per node, selected by field)."""
    found = set()
    for node in nodes:
        query = {"fieldSelector": f"spec.nodeName={node},status.phase=Running"}
        body = _ok(api, "/api/v1/pods", query)
        found |= {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in body.get("items", [])}
    return found


def samples(api: client.ApiClient, version: str, scope: SampleScope) -> dict[str, Sample]:
    """The node and pod samples `version` serves within `scope`, by "node/<name>" and "pod/<ns>/<name>".

    A version that does not answer raises `ApiException`; a node or pod it has no sample for is left out (metrics
    pipelines skip objects they could not scrape).
    """
    return samples_of_versions(api, (version,), scope)[version]


def samples_of_versions(
    api: client.ApiClient, versions: Sequence[str], scope: SampleScope
) -> dict[str, dict[str, Sample]]:
    """Each version's samples (as `samples`) of the same objects, by version.

    The pods are listed once, and each object is read from every version back to back: pods that other checks
    create and delete make the versions differ only within one object's reads (milliseconds), not within a whole
    read of each version (seconds on a busy cluster, where the parity check waited 10 s for a read without churn).
    """
    for version in versions:
        _ok(api, f"/apis/{GROUP}/{version}")
    paths = [("node", f"nodes/{node}") for node in scope.nodes]
    for pod in sorted(running_pods(api, scope.nodes))[:SCOPE_PODS]:
        namespace, name = pod.split("/", 1)
        paths.append(("pod", f"namespaces/{namespace}/pods/{name}"))
    found: dict[str, dict[str, Sample]] = {version: {} for version in versions}
    for kind, path in paths:
        for version in versions:
            full = f"{GROUP}/{version}/{path}"
            status, body = get_json(api, f"/apis/{full}")
            if status == 404:
                continue
            _raise_unless_ok(status, body, full)
            sample = _sample(kind, body)
            found[version][f"{kind}/{sample.key}"] = sample
    return found


def _ok(api: client.ApiClient, path: str, query: dict[str, str] | None = None) -> Any:
    status, body = get_json(api, path, query)
    _raise_unless_ok(status, body, path)
    return body


def _raise_unless_ok(status: int, body: Any, what: str) -> None:
    if status != 200:
        message = body.get("message", body) if isinstance(body, dict) else body
        if status == FORBIDDEN:  # the suite's own read: its identity lacks a right, which no wait will change
            raise SuiteForbidden(
                f"GET {what}: {message}; the identity the suite runs as needs the rules of "
                "dra_conformance/kube/ci-clusterrole.yaml (in a pod: dra-conformance sonobuoy-plugin --rbac)"
            )
        raise ApiException(status=status, reason=f"GET {what}: {message}")


def parity_differences(first: dict[str, Sample], second: dict[str, Sample], tolerance: float) -> list[str]:
    """Where two versions disagree: objects only one has, timestamps, windows, or usage beyond `tolerance`."""
    problems = [f"only in the first: {key}" for key in sorted(set(first) - set(second))]
    problems += [f"only in the second: {key}" for key in sorted(set(second) - set(first))]
    for key in sorted(set(first) & set(second)):
        a, b = first[key], second[key]
        if a.timestamp != b.timestamp or a.window != b.window:
            problems.append(f"{key}: timestamp/window {a.timestamp}/{a.window} vs {b.timestamp}/{b.window}")
        for what, x, y in (("cpu", a.cpu_millicores, b.cpu_millicores), ("memory", a.memory_bytes, b.memory_bytes)):
            if abs(x - y) > tolerance * max(abs(x), abs(y), 1e-9):
                problems.append(f"{key}: {what} {x:g} vs {y:g}")
    return problems


def lag_seconds(found: Iterable[Sample], now: datetime.datetime) -> list[float]:
    """How old each sample is."""
    return [(now - sample.timestamp).total_seconds() for sample in found]


def summarize_lag(values: list[float]) -> tuple[float, float]:
    """(p50, p95) of lags; (0, 0) for none."""
    if not values:
        return 0.0, 0.0
    return percentile(values, 0.5), percentile(values, 0.95)


def wait_first_node_samples(api: client.ApiClient, version: str, scope: SampleScope, timeout: float) -> None:
    """Wait until `version` serves its first NodeMetrics in `scope` (a pipeline warming up is not wrong).

    `WaitTimeout` if it does not.
    """
    waits.until(
        lambda: samples(api, version, scope),
        lambda found: any(key.startswith("node/") for key in found),
        timeout=timeout,
        what=f"first NodeMetrics of {list(scope.nodes)} from {GROUP}/{version}",
        describe=lambda found: sorted(found),
        retry_on=(ApiException,),
    )
