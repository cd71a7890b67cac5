"""A test namespace whose deletion failing aggregated discovery blocks is explained in one line, not awaited.

The namespace controller keeps a namespace while discovery of any API group version fails
(NamespaceDeletionDiscoveryFailure): a frozen metrics adapter blocks every namespace deletion of the cluster. The
reaper waits its deadline, then names the namespaces and the APIServices that fail, and the run goes on.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube.namespaces import NamespaceDeletionBlocked, NamespaceReaper, failing_apiservices

# What kube-controller-manager 1.37 writes while metrics.k8s.io fails discovery (client-go ErrGroupDiscoveryFailed).
DISCOVERY_MESSAGE = (
    "Discovery failed for some groups, 2 failing: unable to retrieve the complete list of server APIs: "
    "metrics.k8s.io/v1: stale GroupVersion discovery: metrics.k8s.io/v1, metrics.k8s.io/v1beta1: stale "
    "GroupVersion discovery: metrics.k8s.io/v1beta1"
)
# A deadline the tests can wait out.
SHORT = 0.3


def _condition(kind: str, message: str) -> SimpleNamespace:
    return SimpleNamespace(type=kind, status="True", message=message)


def _namespace(*conditions: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(status=SimpleNamespace(phase="Terminating", conditions=list(conditions)))


class FakeCore:
    """CoreV1Api as the reaper uses it: namespaces that stay as given (None: gone)."""

    def __init__(self, left: dict[str, Any]) -> None:
        self.left = left
        self.api_client = None
        self.deleted: list[str] = []

    def delete_namespace(self, name: str) -> None:
        self.deleted.append(name)

    def read_namespace(self, name: str) -> Any:
        if self.left.get(name) is None:
            raise ApiException(status=404)
        return self.left[name]


def _apiservices(monkeypatch: pytest.MonkeyPatch, conditions: dict[str, str]) -> None:
    def service(name: str, condition: str) -> SimpleNamespace:
        status, reason = condition.split("/")
        available = SimpleNamespace(type="Available", status=status, reason=reason)
        return SimpleNamespace(metadata=SimpleNamespace(name=name), status=SimpleNamespace(conditions=[available]))

    listed = SimpleNamespace(items=[service(name, condition) for name, condition in conditions.items()])
    api = SimpleNamespace(list_api_service=lambda: listed)
    monkeypatch.setattr(client, "ApiregistrationV1Api", lambda _api_client: api)


def _reaper(left: dict[str, Any]) -> NamespaceReaper:
    reaper = NamespaceReaper(FakeCore(left), SHORT)
    for name in left:
        reaper.delete(name)
    return reaper


def test_the_failing_apiservices_are_read_from_the_condition_message() -> None:
    assert failing_apiservices(DISCOVERY_MESSAGE) == ["v1.metrics.k8s.io", "v1beta1.metrics.k8s.io"]
    assert failing_apiservices("unable to retrieve the complete list of server APIs: custom.example.com/v1alpha1: x")
    assert failing_apiservices("something else entirely") == []


def test_namespaces_blocked_by_failing_discovery_are_explained_in_one_line_and_not_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _apiservices(
        monkeypatch,
        {"v1.metrics.k8s.io": "False/FailedDiscoveryCheck", "v1beta1.metrics.k8s.io": "False/FailedDiscoveryCheck"},
    )
    blocked = _namespace(
        _condition("NamespaceDeletionDiscoveryFailure", DISCOVERY_MESSAGE),
        _condition("NamespaceContentRemaining", "Some resources are remaining: pods. has 1 resource instances"),
    )
    reaper = _reaper({"hpa-test-1a2b3c": blocked, "dra-rollback-metrics-4d5e6f": blocked, "gone": None})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reaper.wait_all()
    assert [w.category for w in caught] == [NamespaceDeletionBlocked], caught
    line = str(caught[0].message)
    assert "\n" not in line, line
    assert "2 test namespace(s) still Terminating after 0.3 s (dra-rollback-metrics-4d5e6f, hpa-test-1a2b3c)" in line
    assert (
        "APIService(s) v1.metrics.k8s.io (False/FailedDiscoveryCheck), v1beta1.metrics.k8s.io "
        "(False/FailedDiscoveryCheck)" in line
    ), line
    assert "NamespaceDeletionDiscoveryFailure" in line and "not the driver's" in line, line


def test_a_namespace_held_by_anything_else_still_times_out_with_its_conditions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _apiservices(monkeypatch, {})
    reaper = _reaper(
        {
            "blocked": _namespace(_condition("NamespaceDeletionDiscoveryFailure", DISCOVERY_MESSAGE)),
            "finalizer": _namespace(_condition("NamespaceFinalizersRemaining", "example.com/hold in 1 resource")),
        }
    )
    with pytest.raises(WaitTimeout) as timed_out:
        reaper.wait_all()
    assert "example.com/hold" in str(timed_out.value), timed_out.value


def test_namespaces_that_go_in_time_are_simply_awaited(monkeypatch: pytest.MonkeyPatch) -> None:
    _apiservices(monkeypatch, {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _reaper({"gone": None}).wait_all()


def test_where_the_cluster_is_discarded_with_the_run_no_namespace_is_deleted() -> None:
    core = FakeCore({"a": None, "b": None})
    reaper = NamespaceReaper(core, SHORT, discarded_with_cluster=True)
    reaper.delete("a")
    reaper.delete("b")
    reaper.settle(cluster_discarded=True)
    assert core.deleted == [], core.deleted


def test_held_namespaces_are_deleted_and_awaited_once_the_cluster_turns_out_to_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _apiservices(monkeypatch, {})
    core = FakeCore({"a": None, "b": _namespace(_condition("NamespaceContentRemaining", "pods remain"))})
    reaper = NamespaceReaper(core, SHORT, discarded_with_cluster=True)
    reaper.delete("a")
    reaper.delete("b")
    assert core.deleted == [], "held back while the cluster is to be discarded"
    with pytest.raises(WaitTimeout) as timed_out:
        reaper.settle(cluster_discarded=False)  # another run attached: the cluster stays
    assert core.deleted == ["a", "b"], core.deleted
    assert "pods remain" in str(timed_out.value), timed_out.value


def test_a_kept_cluster_has_its_namespaces_deleted_as_their_tests_end(monkeypatch: pytest.MonkeyPatch) -> None:
    _apiservices(monkeypatch, {})
    core = FakeCore({"a": None})
    reaper = NamespaceReaper(core, SHORT)
    reaper.delete("a")
    assert core.deleted == ["a"], core.deleted
    reaper.settle(cluster_discarded=False)
