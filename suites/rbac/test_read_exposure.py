"""Who can read the sensitive metadata: claim readers beyond their own namespace, against an allowlist.

Whoever reads a ResourceClaim reads its status.devices (device IDs, interface names, IPs, MACs).

The cluster's RBAC proposes the readers, SubjectAccessReview confirms each (`dra_conformance/rbac/read_exposure.py`);
the API allows any reader, so one outside the allowlist is a defensive finding (`dra_conformance/model/registry/
rbac.yaml`). It reads RBAC and asks the API server only, so it runs on any backend. The finding goes to the summary
(`read_exposure` in summary.json, a line in summary.md) and to read-exposure.json with every reader.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from dra_conformance.driver.profile import DriverProfile
from dra_conformance.model.findings import Obligations
from dra_conformance.model.records import RunRecords
from dra_conformance.rbac import read_exposure
from dra_conformance.rbac.read_allowlist import Allowlist

# The check reads the whole cluster's RBAC: tests/cluster/test_read_exposure.py plants an over-broad binding for a
# moment, so in a run of both (CI's `pytest tests suites`) they share a worker and never overlap (loadgroup).
pytestmark = pytest.mark.xdist_group("read-exposure")


def test_claims_are_readable_beyond_their_namespace_only_by_allowlisted_subjects(
    api_client: client.ApiClient,
    driver_profile: DriverProfile,
    read_allowlist: Allowlist,
    run_records: RunRecords,
    obligations: Obligations,
) -> None:
    record = read_exposure.survey(api_client, read_allowlist, read_exposure.profile_identities(driver_profile))
    run_records.add(read_exposure.RECORD_KIND, record)
    outside = read_exposure.describe_outside(record)
    obligations.check(
        "rbac.claim-readers-beyond-their-namespace-allowlisted",
        not outside,
        f"{len(outside)} reader(s) outside the allowlist ({record['allowlist']}): {'; '.join(outside)}",
        "the cluster's RBAC, confirmed by SubjectAccessReview",
    )
