"""Least privilege: the driver's ServiceAccount holds nothing beyond the RBAC its profile ships.

The API server accepts any grant, so holding or shipping more than a driver needs is a defensive finding
(`dra_conformance/model/registry/rbac.yaml`); the audit itself is checked against a known over-privileged role.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance import paths
from dra_conformance.driver.identity import DriverIdentity
from dra_conformance.driver.profile import DriverProfile
from dra_conformance.kube import builders
from dra_conformance.kube.identities import request_token, token_client
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.model.findings import Obligations
from dra_conformance.rbac import audit as rbac_audit
from dra_conformance.rbac.environment import overprivileged_role


def _excess(
    api_client: client.ApiClient,
    namespace: str,
    service_account: str,
    documented: set[rbac_audit.Permission],
    tracker: ResourceTracker,
    probe_namespace: str,
) -> list[str]:
    baseline_sa = tracker.create(builders.service_account("baseline", probe_namespace))
    with token_client(api_client, request_token(api_client, probe_namespace, baseline_sa["metadata"]["name"])) as fresh:
        baseline = rbac_audit.granted(fresh, namespace)
    with token_client(api_client, request_token(api_client, namespace, service_account)) as identity:
        held = rbac_audit.granted(identity, namespace)
    return rbac_audit.excess(held, documented, baseline)


def test_driver_holds_no_permission_beyond_the_rbac_its_profile_ships(
    driver_profile: DriverProfile,
    api_client: client.ApiClient,
    tracker: ResourceTracker,
    namespace: str,
    obligations: Obligations,
) -> None:
    account = driver_profile.identity.service_account
    where = f"ServiceAccount {account.namespace}/{account.name}"
    if not driver_profile.identity.rbac:
        pytest.skip(f"not applicable: {driver_profile.source} names no RBAC manifests to audit against")
    try:
        client.CoreV1Api(api_client).read_namespaced_service_account(account.name, account.namespace)
    except ApiException as error:
        if error.status != 404:
            raise
        obligations.fail("rbac.driver-service-account-exists", f"not found (named by {driver_profile.source})", where)
    documented = rbac_audit.documented(driver_profile.identity.rbac, driver_profile.driver)
    extra = _excess(api_client, account.namespace, account.name, documented, tracker, namespace)
    files = ", ".join(str(path) for path in driver_profile.identity.rbac)
    obligations.check("rbac.driver-holds-only-the-shipped-rbac", not extra, f"holds beyond {files}: {extra}", where)


def test_driver_rbac_grants_nothing_beyond_its_declared_capabilities(
    driver_profile: DriverProfile, obligations: Obligations
) -> None:
    if not driver_profile.identity.rbac:
        pytest.skip(f"not applicable: {driver_profile.source} names no RBAC manifests")
    documented = rbac_audit.documented(driver_profile.identity.rbac, driver_profile.driver)
    needed = rbac_audit.minimum(driver_profile.capabilities, driver_profile.driver)
    extra = rbac_audit.excess(documented, needed, baseline=set())
    files = ", ".join(str(path) for path in driver_profile.identity.rbac)
    obligations.check(
        "rbac.shipped-rbac-within-declared-capabilities",
        not extra,
        f"grants beyond what {sorted(driver_profile.capabilities)} need: {extra}",
        files,
    )


def test_audit_flags_every_excess_grant_of_an_overprivileged_driver_role(
    api_client: client.ApiClient, tracker: ResourceTracker, namespace: str, obligations: Obligations
) -> None:
    driver = f"audit-{namespace.rsplit('-', 1)[1]}.example.com"
    DriverIdentity(tracker, api_client, namespace, driver, rbac=overprivileged_role, service_account="greedy")
    documented = rbac_audit.documented([paths.reference_driver_rbac()], driver)
    extra = _excess(api_client, namespace, "greedy", documented, tracker, namespace)
    expected = [
        "resource.k8s.io resourceclaims delete",
        "resource.k8s.io resourceclaims update",
        f"resource.k8s.io resourceclaims/driver arbitrary-node:patch [{driver}]",
        "resource.k8s.io resourceclaims/status update",
    ]
    obligations.check(
        "rbac.audit-flags-an-overprivileged-role",
        extra == expected,
        f"the audit found {extra}, expected {expected}",
        f"ServiceAccount {namespace}/greedy",
    )
