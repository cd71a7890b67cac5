"""A planted over-broad binding: the read-exposure finder reports its subject, until the allowlist file names it.

A ServiceAccount is bound to a ClusterRole that lists ResourceClaims cluster-wide, as a tool installed with too
broad RBAC would be; the finder must propose it from RBAC, have the API server confirm it, and judge it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from dra_conformance.kube import builders, waits
from dra_conformance.kube.namespaces import RUN_ID_LABEL
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.rbac import read_allowlist
from dra_conformance.rbac.claim_readers import Subject
from dra_conformance.rbac.read_exposure import allowed, survey

# The planted binding would be a finding of the rbac suite's read-exposure check in the same run: one worker runs
# both, one after the other (loadgroup), and the tracker deletes the binding before the check can list it.
pytestmark = pytest.mark.xdist_group("read-exposure")
# RBAC changes reach the API server's authorizer through an informer, within a second or two.
RBAC_PROPAGATION = 30.0


def _row(record: dict[str, object], subject: str) -> object:
    readers = record["readers"]
    assert isinstance(readers, list)
    return next((row for row in readers if row["subject"] == subject), None)


def test_finder_reports_a_planted_cluster_wide_claim_reader_until_the_allowlist_names_it(
    api_client: client.ApiClient, tracker: ResourceTracker, namespace: str, tmp_path: Path
) -> None:
    # The suite allows the ServiceAccounts of its own test namespaces (the identities its checks create); the
    # planted one stands for a foreign tool's, so its namespace gives up the run label that marks the suite's.
    client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": {RUN_ID_LABEL: None}}})
    tracker.create(builders.service_account("reader", namespace))
    role = f"{namespace}-claim-lister"
    tracker.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["list"]}],
        }
    )
    tracker.create(builders.cluster_role_binding(role, namespace, "reader"))
    planted = Subject("ServiceAccount", "reader", namespace)
    waits.until(
        lambda: allowed(api_client, planted, "list", ""),
        bool,
        timeout=RBAC_PROPAGATION,
        what=f"the authorizer lets {planted} list resourceclaims in all namespaces",
    )

    record = survey(api_client, read_allowlist.load(None))
    expected = {
        "subject": str(planted),
        "scope": "all namespaces",
        "verbs": ["list"],
        "via": [f"ClusterRoleBinding {role} -> ClusterRole {role}"],
        "allowed_by": None,
    }
    assert _row(record, str(planted)) == expected, record
    assert record["state"] == "exposed" and str(planted) in record["outside_allowlist"], record
    print(f"read exposure {record['state']}: outside the allowlist {record['outside_allowlist']}; {expected}")

    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text(f"subjects:\n  - ServiceAccount/{namespace}/*\n")
    record = survey(api_client, read_allowlist.load(allowlist))
    assert record["allowlist"] == str(allowlist), record
    assert str(planted) not in record["outside_allowlist"], record
    assert _row(record, str(planted)) == {**expected, "allowed_by": f"ServiceAccount/{namespace}/*"}, record
