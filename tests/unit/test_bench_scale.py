"""bench/scale's pure parts: the API server's metrics, the audit log's list calls, their scope, the growth's shape.

The bench itself starts two clusters and runs every suite twice (minutes): it is never run by tests.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from dra_conformance import paths

sys.path.insert(0, str(paths.CHECKOUT / "bench"))
import bench_scale
from bench_scale import Call

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",group="",resource="nodes",scope="cluster",subresource="",verb="LIST"} 12
apiserver_request_total{group="resource.k8s.io",resource="resourceslices",scope="cluster",verb="LIST"} 3
apiserver_request_total{code="200",group="",resource="pods",scope="namespace",subresource="status",verb="PATCH"} 7
apiserver_response_sizes_sum{group="",resource="nodes",scope="cluster",subresource="",verb="LIST"} 4096
apiserver_response_sizes_count{group="",resource="nodes",scope="cluster",subresource="",verb="LIST"} 2
apiserver_response_sizes_sum{group="",resource="nodes",scope="resource",subresource="",verb="GET"} 900
etcd_request_duration_seconds_count{operation="get",type="/registry/nodes"} 5
"""

NAMES = (bench_scale.REQUESTS_METRIC, "apiserver_response_sizes_sum", "apiserver_response_sizes_count")


def test_request_counts_are_the_increase_per_resource_and_verb() -> None:
    before = bench_scale.parse_metrics(METRICS, NAMES)
    after = bench_scale.parse_metrics(METRICS.replace("} 12", "} 20").replace("} 7", "} 7"), NAMES)
    counts = bench_scale.requests_by_resource(bench_scale.delta(before, after))
    assert counts == Counter({("nodes", "LIST"): 8}), counts
    everything = bench_scale.requests_by_resource(before)
    assert everything[("resourceslices.resource.k8s.io", "LIST")] == 3, everything
    assert everything[("pods/status", "PATCH")] == 7, everything


def test_list_bytes_sum_and_count_by_resource_and_scope_leave_other_verbs_out() -> None:
    found = bench_scale.list_bytes_by_resource(bench_scale.parse_metrics(METRICS, NAMES))
    assert found == {("nodes", "cluster"): (4096.0, 2)}, found


def test_paging_and_watch_parameters_are_dropped_selectors_and_limit_kept() -> None:
    uri = "/api/v1/nodes?limit=500&resourceVersion=0&labelSelector=a%3Db&continue=xyz&allowWatchBookmarks=true"
    assert bench_scale.normalized(uri) == "/api/v1/nodes?limit=500&labelSelector=a%3Db"
    assert bench_scale.normalized("/api/v1/pods?resourceVersion=12") == "/api/v1/pods"


def test_scope_says_cluster_wide_namespace_or_the_selectors() -> None:
    def call(uri: str, namespace: str = "") -> Call:
        return Call("list", "x", uri, namespace, "u", "a")

    assert bench_scale.selection(call("/api/v1/nodes")) == "cluster-wide"
    assert (
        bench_scale.selection(call("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dd"))
        == "cluster, fieldSelector=spec.driver=d"
    )
    assert bench_scale.selection(call("/api/v1/namespaces/n/pods", "n")) == "namespace n"


def _event(verb: str, stage: str, at: str, uri: str, namespace: str = "", user: str = "admin") -> str:
    reference = {"resource": uri.split("?")[0].rsplit("/", 1)[-1], **({"namespace": namespace} if namespace else {})}
    return json.dumps(
        {
            "verb": verb,
            "stage": stage,
            "requestReceivedTimestamp": at,
            "requestURI": uri,
            "objectRef": reference,
            "user": {"username": user},
            "userAgent": "OpenAPI-Generator/37.0.2/python extra",
        },
        separators=(",", ":"),  # as the API server writes its log
    )


def test_the_window_keeps_list_calls_and_cluster_wide_watches_received_in_it() -> None:
    since = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    lines = [
        _event("list", "ResponseComplete", "2023-11-14T22:13:19Z", "/api/v1/nodes"),  # before the window
        _event("list", "ResponseComplete", "2023-11-14T22:13:21Z", "/api/v1/nodes?resourceVersion=0"),
        _event("list", "ResponseComplete", "2023-11-14T22:13:22Z", "/api/v1/nodes"),
        _event("list", "ResponseComplete", "2023-11-14T22:13:22Z", "/api/v1/namespaces/n/pods", "n"),
        _event("watch", "ResponseStarted", "2023-11-14T22:13:23Z", "/api/v1/events?watch=true"),
        _event("watch", "ResponseStarted", "2023-11-14T22:13:23Z", "/api/v1/events?watch=true&fieldSelector=a%3Db"),
        _event("get", "ResponseComplete", "2023-11-14T22:13:24Z", "/api/v1/nodes/x", user="other"),
        '{"verb":"list","stage":"ResponseComplete", cut short',
        _event("list", "ResponseComplete", "2023-11-14T22:13:40Z", "/api/v1/nodes"),  # after it
    ]
    window = bench_scale.read_window(lines, since, since + 10)
    nodes = Call("list", "nodes", "/api/v1/nodes", "", "admin", "OpenAPI-Generator/37.0.2/python")
    assert window.lists[nodes] == 2, window.lists
    assert sum(window.lists.values()) == 3, window.lists
    assert [call.uri for call in window.cluster_watches] == ["/api/v1/events"], window.cluster_watches
    assert window.by_user == Counter({"admin": 3, "other": 1}), window.by_user


def test_node_addresses_stay_on_loopback_past_the_last_octet() -> None:
    assert bench_scale.node_address(0) == "127.0.0.10"
    assert bench_scale.node_address(245) == "127.0.0.255"
    assert bench_scale.node_address(246) == "127.0.1.0"
    assert len({bench_scale.node_address(index) for index in range(1000)}) == 1000


def test_devices_spread_over_the_pools_add_up() -> None:
    assert bench_scale.per_node(10_000, 1000) == [10] * 1000
    spread = bench_scale.per_node(7, 3)
    assert spread == [3, 2, 2] and sum(spread) == 7, spread


def test_lists_in_namespaces_that_outlived_the_run_are_replayed_and_the_runs_own_are_not() -> None:
    window = bench_scale.AuditWindow()
    calls = {
        "/api/v1/nodes": "",
        "/api/v1/namespaces/test-a1b2/pods": "test-a1b2",
        "/api/v1/namespaces/unrelated-3/pods": "unrelated-3",
        "/apis/resource.k8s.io/v1/namespaces/kube-system/resourceclaims": "kube-system",
    }
    for uri, namespace in calls.items():
        window.lists[Call("list", "pods", uri, namespace, "dra-conformance-admin", "agent")] += 1
    replayed = bench_scale.replayed_lists(window, {"unrelated-3", "kube-system", "default"})
    assert replayed == [
        "/api/v1/namespaces/unrelated-3/pods",
        "/api/v1/nodes",
        "/apis/resource.k8s.io/v1/namespaces/kube-system/resourceclaims",
    ], replayed


def test_pytest_node_ids_are_named_as_junit_names_them() -> None:
    assert (
        bench_scale.junit_key("suites/rollback/test_metrics_rollback.py::test_before@metrics")
        == "suites.rollback.test_metrics_rollback::test_before@metrics"
    )
    assert bench_scale.junit_key("suites/a/test_b.py::TestC::test_d[x/y]") == "suites.a.test_b.TestC::test_d[x/y]"
