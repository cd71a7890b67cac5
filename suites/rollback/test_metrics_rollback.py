"""Rollback rehearsal, metrics.k8s.io v1 -> v1beta1 only -> v1 again, with consumers reading throughout.

Three phases, in order: `before` (both versions served and Available, consumers read both), `after_change` (v1's
APIService is gone and nothing of it lingers; v1beta1 readers and HPA-style reads keep working) and
`after_rollback` (v1 is back, the group's APIServices are those of `before`, the versions agree, consumers read
both). With every phase in one run, or with `--rollback-drive`, the suite removes and restores v1 itself; with a
single phase on an existing cluster it observes what the staging team did. The checks are the metrics suite's
(`dra_conformance.metrics.rollback`); each phase records its timings in the state file and the rollback report.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from dra_conformance.kube.namespaces import NamespaceReaper
from dra_conformance.metrics.rehearsal import run_after_change, run_after_rollback, run_before
from dra_conformance.plugin.rollback_fixtures import Rehearsal, finish_metrics, resume_metrics, set_up_metrics
from dra_conformance.rollback.state import Phase, PhaseRecord
from dra_conformance.timeouts import Timeouts

# The phases change the cluster-wide metrics APIServices: run them on the metrics suite's worker, never beside it.
pytestmark = pytest.mark.xdist_group("metrics")


def _verdict(record: PhaseRecord) -> None:
    assert record.passed, (
        f"metrics rollback phase {record.phase} failed: problems {record.problems}; left behind {record.left_behind}; "
        f"facts {record.facts}"
    )


@pytest.mark.rollback_phase("before")
def test_before_the_change_both_metrics_versions_serve_their_consumers(
    metrics_rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    run_id: str,
    timeouts: Timeouts,
    freshness_slo: float,
    namespace_reaper: NamespaceReaper,
) -> None:
    engine = set_up_metrics(metrics_rehearsal, api_client, metrics_client, run_id, timeouts, freshness_slo)
    record = run_before(engine)
    metrics_rehearsal.record(record)
    if not record.passed and metrics_rehearsal.single_phase:
        finish_metrics(metrics_rehearsal, namespace_reaper, restore=False)  # nothing to continue from
    _verdict(record)


@pytest.mark.rollback_phase("after_change")
def test_after_the_change_no_v1_apiservice_lingers_and_v1beta1_consumers_keep_working(
    metrics_rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    timeouts: Timeouts,
    freshness_slo: float,
) -> None:
    if Phase.BEFORE not in metrics_rehearsal.state.records:
        pytest.skip(
            f"not applicable: the metrics rehearsal's phase before is not recorded in {metrics_rehearsal.state.path}"
        )
    engine = resume_metrics(metrics_rehearsal, api_client, metrics_client, timeouts, freshness_slo)
    record = run_after_change(engine, metrics_rehearsal.state, drive=metrics_rehearsal.drive)
    metrics_rehearsal.record(record)
    _verdict(record)


@pytest.mark.rollback_phase("after_rollback")
def test_after_the_rollback_v1_serves_again_and_no_apiservice_is_left_behind(
    metrics_rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    timeouts: Timeouts,
    freshness_slo: float,
    namespace_reaper: NamespaceReaper,
) -> None:
    if Phase.AFTER_CHANGE not in metrics_rehearsal.state.records:
        pytest.skip(
            "not applicable: the metrics rehearsal's phase after_change is not recorded in "
            f"{metrics_rehearsal.state.path}"
        )
    engine = resume_metrics(metrics_rehearsal, api_client, metrics_client, timeouts, freshness_slo)
    try:
        record = run_after_rollback(engine, metrics_rehearsal.state, drive=metrics_rehearsal.drive)
    finally:
        left = finish_metrics(metrics_rehearsal, namespace_reaper, restore=metrics_rehearsal.drive)
    record.left_behind.extend(left)
    metrics_rehearsal.record(record)
    _verdict(record)
