"""A rollback done in the wrong order is caught, and the rollback report says what was left and where."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from dra_conformance.driver.under_test import DriverUnderTest
from dra_conformance.kube.namespaces import NamespaceReaper
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.rollback.extended_resource import run_after_change, run_after_rollback, run_before
from dra_conformance.rollback.report import REPORT_MARKDOWN
from dra_conformance.rollback.state import RehearsalState
from dra_conformance.rollback.steps import Rehearsal, finish, set_up
from dra_conformance.timeouts import Timeouts

# Not the suite's resource, so a rehearsal of suites/rollback in the same run is not disturbed.
RESOURCE = "example.com/broken-rollback"


@pytest.mark.xdist_group("rollback-rehearsal")
def test_a_device_class_removed_while_a_pod_holds_its_claim_is_reported_left_behind(
    api_client: client.ApiClient,
    driver_under_test: DriverUnderTest,
    run_id: str,
    timeouts: Timeouts,
    namespace_reaper: NamespaceReaper,
    tmp_path: Path,
    cluster: ClusterInfo,
) -> None:
    rehearsal = Rehearsal(RehearsalState(tmp_path / "state.json"), tmp_path, drive=True, single_phase=False)
    engine = set_up(rehearsal, api_client, driver_under_test, RESOURCE, run_id, timeouts, cluster)
    try:
        rehearsal.record(run_before(engine))
        rehearsal.record(run_after_change(engine, rehearsal.state, drive=True))
        assert all(r.passed for r in rehearsal.state.records.values()), rehearsal.state.records
        broken = run_after_rollback(engine, rehearsal.state, drive=True, drain_first=False)
    finally:
        left = finish(rehearsal, timeouts, namespace_reaper)
    broken.left_behind.extend(left)
    rehearsal.record(broken)
    held = [item for item in broken.left_behind if "w2-dra" in item and "no DeviceClass serves" in item]
    assert held, f"the pod still holding a DRA claim is not reported: {broken.left_behind}"
    report = (tmp_path / REPORT_MARKDOWN).read_text()
    assert "First failed phase: **after_rollback**" in report and "w2-dra" in report, report
