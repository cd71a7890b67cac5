"""Least privilege: a driver's ServiceAccount holds nothing beyond the documented set (deploy/rbac.yaml)."""

from __future__ import annotations

import pytest
from kubernetes import client

from dra_conformance import paths
from dra_conformance.backends.base import ClusterInfo
from dra_conformance.driver.identity import DriverIdentity
from dra_conformance.kube import builders
from dra_conformance.kube.identities import request_token, token_client
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.plugin.rbac_fixtures import driver_service_account_option
from dra_conformance.rbac import audit as rbac_audit
from dra_conformance.rbac.environment import overprivileged_role


def _excess(
    api_client: client.ApiClient,
    namespace: str,
    service_account: str,
    driver: str,
    tracker: ResourceTracker,
    probe_namespace: str,
) -> list[str]:
    baseline_sa = tracker.create(builders.service_account("baseline", probe_namespace))
    with token_client(api_client, request_token(api_client, probe_namespace, baseline_sa["metadata"]["name"])) as fresh:
        baseline = rbac_audit.granted(fresh, namespace)
    with token_client(api_client, request_token(api_client, namespace, service_account)) as identity:
        held = rbac_audit.granted(identity, namespace)
    return rbac_audit.excess(held, rbac_audit.documented(paths.reference_driver_rbac(), driver), baseline)


def test_driver_holds_no_permission_beyond_its_least_privilege_set(
    request: pytest.FixtureRequest,
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    tracker: ResourceTracker,
    namespace: str,
) -> None:
    identity = driver_service_account_option(request.config, cluster)
    if identity is None:
        pytest.skip("no driver ServiceAccount known: pass --driver-service-account=NAMESPACE/NAME and --driver-name")
    sa_namespace, service_account, driver = identity
    extra = _excess(api_client, sa_namespace, service_account, driver, tracker, namespace)
    assert extra == [], f"{sa_namespace}/{service_account} holds more than deploy/rbac.yaml grants: {extra}"


def test_overprivileged_driver_rbac_is_flagged(
    api_client: client.ApiClient, tracker: ResourceTracker, namespace: str
) -> None:
    driver = f"audit-{namespace.rsplit('-', 1)[1]}.example.com"
    DriverIdentity(tracker, api_client, namespace, driver, rbac=overprivileged_role, service_account="greedy")
    extra = _excess(api_client, namespace, "greedy", driver, tracker, namespace)
    expected = [
        "resource.k8s.io resourceclaims delete",
        "resource.k8s.io resourceclaims update",
        f"resource.k8s.io resourceclaims/driver arbitrary-node:patch [{driver}]",
        "resource.k8s.io resourceclaims/status update",
    ]
    assert extra == expected, f"audit of the over-privileged variant: {extra}"
