"""Authorization matrix: who may write DRA status, publish slices, read claims and metrics.

Every cell runs in every served version of resource.k8s.io: a policy that only covers one version must not hide
a hole in another.
"""

from __future__ import annotations

import allure
import pytest

from dra_conformance.rbac.environment import RbacEnvironment
from dra_conformance.rbac.matrix import RECORD_KIND, Row, cell_record
from dra_conformance.report.records import RunRecords

# Outcomes decided by RBAC alone, where SelfSubjectAccessReview must agree with the real request.
RBAC_ONLY = {"claims-list", "metrics-get"}


def test_identity_gets_the_expected_answer(
    cell: tuple[Row, str | None],
    rbac_environment: RbacEnvironment,
    served_versions: list[str],
    request: pytest.FixtureRequest,
    run_records: RunRecords,
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
    assert result.outcome != "error", f"could not evaluate: {result.describe()}"
    assert result.outcome == row.expect, f"expected {row.expect} ({row.why}); got {result.describe()}"
    if row.action in RBAC_ONLY:
        assert result.access_review == (result.outcome == "allow"), (
            f"SelfSubjectAccessReview disagrees: {result.describe()}"
        )
