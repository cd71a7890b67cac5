"""Authorization matrix: who may write DRA status, publish slices, read claims and metrics.

Every cell runs in every served version of resource.k8s.io: a policy that only covers one version must not hide
a hole in another. What the answer must be is the cluster's contract, by the kind of action
(`dra_conformance/model/registry/rbac.yaml`); a cell that cannot be evaluated is the matrix's own problem.
"""

from __future__ import annotations

import allure
import pytest

from dra_conformance.model.findings import Obligations
from dra_conformance.model.records import RunRecords
from dra_conformance.rbac.environment import RbacEnvironment
from dra_conformance.rbac.matrix import RECORD_KIND, Row, cell_record

# Outcomes decided by RBAC alone, where SelfSubjectAccessReview must agree with the real request.
RBAC_ONLY = {"claims-list", "metrics-get"}
# The obligation a cell's answer checks, by its action (the rule that decides it).
ANSWER_OBLIGATIONS = {
    "status-devices": "rbac.claim-status-writes-authorized-as-expected",
    "status-devices-other-driver": "rbac.claim-status-writes-authorized-as-expected",
    "status-devices-update": "rbac.claim-status-writes-authorized-as-expected",
    "status-reserved-for": "rbac.claim-status-writes-authorized-as-expected",
    "status-allocation": "rbac.claim-status-writes-authorized-as-expected",
    "slice-create": "rbac.slice-writes-authorized-as-expected",
    "slice-update": "rbac.slice-writes-authorized-as-expected",
    "slice-delete": "rbac.slice-writes-authorized-as-expected",
    "claims-list": "rbac.reads-authorized-as-expected",
    "metrics-get": "rbac.reads-authorized-as-expected",
}


def test_cluster_authorizes_each_identity_as_the_matrix_expects(
    cell: tuple[Row, str | None],
    rbac_environment: RbacEnvironment,
    served_versions: list[str],
    request: pytest.FixtureRequest,
    run_records: RunRecords,
    obligations: Obligations,
) -> None:
    row, version = cell
    if version is not None and version not in served_versions:
        pytest.skip(f"not applicable: resource.k8s.io/{version} is not served (served: {', '.join(served_versions)})")
    missing = rbac_environment.unavailable(row.identity)
    if missing:
        pytest.skip(f"not applicable: {missing}")
    result = rbac_environment.run(row, version or "v1")
    run_records.add(RECORD_KIND, cell_record(request.node.callspec.id, row, result))
    allure.attach(result.describe(), "answer", allure.attachment_type.TEXT)
    request.node.user_properties.append(("answer", result.describe()))
    where = f"cell {request.node.callspec.id}"
    obligations.check("rbac.matrix-cell-evaluated", result.outcome != "error", result.describe(), where)
    obligations.check(
        ANSWER_OBLIGATIONS[row.action],
        result.outcome == row.expect,
        f"expected {row.expect} ({row.why}); got {result.describe()}",
        where,
    )
    if row.action in RBAC_ONLY:
        obligations.check(
            "rbac.access-review-agrees-with-the-request",
            result.access_review == (result.outcome == "allow"),
            result.describe(),
            where,
        )
