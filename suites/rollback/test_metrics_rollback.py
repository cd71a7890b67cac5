"""Rollback rehearsal, metrics.k8s.io v1 -> v1beta1 only -> v1 again, with consumers reading throughout.

Three phases, in order: `before` (both versions served and Available, consumers read both), `after_change` (v1's
APIService is gone and nothing of it lingers; v1beta1 readers and HPA-style reads keep working) and
`after_rollback` (v1 is back, the group's APIServices are those of `before`, the versions agree, consumers read
both). With every phase in one run, or with `--dra-rollback-drive`, the suite removes and restores v1 itself; with a
single phase on an existing cluster it observes what the staging team did. The checks are the metrics suite's
(`dra_conformance.metrics.rollback`); each phase records its timings in the state file and the rollback report.

Each kind of problem a phase records is judged as the obligation it breaks (`rollback.yaml`): the rehearsal's
starting point, its consumer target, and the change and the rollback themselves are preconditions; whether the
versions serve, agree and answer their consumers through them are findings about the metrics implementation.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from dra_conformance.kube.namespaces import NamespaceReaper
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.model.findings import Obligations
from dra_conformance.rollback.metrics_rehearsal import run_after_change, run_after_rollback, run_before
from dra_conformance.rollback.state import Phase, PhaseRecord
from dra_conformance.rollback.steps import Rehearsal, finish_metrics, resume_metrics, set_up_metrics
from dra_conformance.timeouts import Timeouts

from .phase_verdicts import Kinds, by_kind, judge, kind

# The phases change the cluster-wide metrics APIServices: run them on the metrics suite's worker, never beside it.
pytestmark = pytest.mark.xdist_group("metrics")


# What consumers of a served version would miss (dra_conformance.metrics.rollback.consumer_problems).
CONSUMER_KINDS: Kinds = (
    kind("rollback.metrics-readers-get-node-metrics", r"a node reader of \S+ (gets no NodeMetrics|is refused)"),
    kind("rollback.metrics-hpa-style-read-answers", r"an HPA-style read of \S+ (is refused|in .* finds no PodMetrics)"),
    kind("rollback.metrics-samples-fresh", r"HPA-style read of \S+: \S+ is \d+ s old"),
    kind("rollback.metrics-no-zero-use", r"HPA-style read of \S+: \S+ reports zero use"),
)
PARITY_KINDS: Kinds = (kind("rollback.metrics-versions-agree", r"v1 and v1beta1 disagree: "),)
# Those of the change (rolled_back_problems): a v1 APIService still there when the staging team drives means that
# the change was not made yet; when the suite removed it, that it lingers.
LINGERING_KINDS: Kinds = (
    kind("rollback.metrics-removed-version-leaves-nothing", r"discovery still lists "),
    kind("rollback.metrics-removed-version-leaves-nothing", r"GET \S+ answered \d+, expected 404"),
    kind("rollback.metrics-versions-serve", r"\S+\.metrics\.k8s\.io Available: "),
)


def _kinds(phase: Phase, *, drive: bool) -> Kinds:
    """What a phase records (dra_conformance.rollback.metrics_rehearsal), by the obligation each kind breaks."""
    if phase == Phase.BEFORE:
        return (
            kind("rollback.metrics-rehearsal-baseline", r"APIService \S+ missing before the change"),
            kind("rollback.metrics-versions-serve", r"APIService \S+ not Available before the change"),
            kind("rollback.metrics-consumer-target-runs", r"consumer target not served"),
            *CONSUMER_KINDS,
            *PARITY_KINDS,
        )
    if phase == Phase.AFTER_CHANGE:
        lingers = "rollback.metrics-removed-version-leaves-nothing" if drive else "rollback.metrics-change-made"
        return (
            kind(lingers, r"APIService v1\.metrics\.k8s\.io lingers: "),
            *LINGERING_KINDS,
            kind("rollback.metrics-versions-serve", r"APIService \S+ not Available after the change"),
            kind("rollback.metrics-apiservices-as-before", r"APIService \S+ missing after the change"),
            kind("rollback.metrics-apiservices-as-before", r"APIService \S+ \(.*\) lingers after the change"),
            *CONSUMER_KINDS,
        )
    return (
        kind("rollback.metrics-rehearsal-baseline", r"before recorded no v1 APIService to restore"),
        kind("rollback.metrics-rollback-made", r"APIService v1\.metrics\.k8s\.io missing after the rollback"),
        kind("rollback.metrics-rollback-made", r"metrics\.k8s\.io/v1 was left removed"),
        kind("rollback.metrics-versions-serve", r"v1 and v1beta1 not both serving after the rollback: "),
        kind("rollback.metrics-versions-serve", r"discovery does not list .* after the rollback"),
        kind("rollback.metrics-versions-serve", r"APIService \S+ not Available after the rollback"),
        kind("rollback.metrics-apiservices-as-before", r"APIService \S+ missing after the rollback"),
        kind("rollback.metrics-apiservices-as-before", r"APIService \S+ \(.*\) lingers after the rollback"),
        *CONSUMER_KINDS,
        *PARITY_KINDS,
    )


def _verdict(obligations: Obligations, record: PhaseRecord, *, drive: bool) -> None:
    """Each kind of problem (and of what was left behind) the phase recorded, as the obligation it breaks."""
    found, unknown = by_kind([*record.problems, *record.left_behind], _kinds(record.phase, drive=drive))
    driven_by = record.facts.get("driven_by")
    judge(
        obligations,
        found,
        unknown,
        f"metrics rollback phase {record.phase}" + (f" (change made by the {driven_by})" if driven_by else ""),
    )


@pytest.mark.rollback_phase("before")
def test_before_the_change_both_metrics_versions_serve_their_consumers(
    metrics_rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    run_id: str,
    timeouts: Timeouts,
    freshness_slo: float,
    namespace_reaper: NamespaceReaper,
    obligations: Obligations,
) -> None:
    engine = set_up_metrics(
        metrics_rehearsal, api_client, metrics_client, run_id, timeouts, freshness_slo, metrics_scope
    )
    record = run_before(engine)
    metrics_rehearsal.record(record)
    if not record.passed and metrics_rehearsal.single_phase:
        finish_metrics(metrics_rehearsal, namespace_reaper, restore=False)  # nothing to continue from
    _verdict(obligations, record, drive=metrics_rehearsal.drive)


@pytest.mark.rollback_phase("after_change")
def test_after_the_change_no_v1_apiservice_lingers_and_v1beta1_consumers_keep_working(
    metrics_rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    timeouts: Timeouts,
    freshness_slo: float,
    obligations: Obligations,
) -> None:
    if Phase.BEFORE not in metrics_rehearsal.state.records:
        pytest.skip(
            f"not applicable: the metrics rehearsal's phase before is not recorded in {metrics_rehearsal.state.path}"
        )
    engine = resume_metrics(metrics_rehearsal, api_client, metrics_client, timeouts, freshness_slo, metrics_scope)
    record = run_after_change(engine, metrics_rehearsal.state, drive=metrics_rehearsal.drive)
    metrics_rehearsal.record(record)
    _verdict(obligations, record, drive=metrics_rehearsal.drive)


@pytest.mark.rollback_phase("after_rollback")
def test_after_the_rollback_v1_serves_again_and_no_apiservice_is_left_behind(
    metrics_rehearsal: Rehearsal,
    api_client: client.ApiClient,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    timeouts: Timeouts,
    freshness_slo: float,
    namespace_reaper: NamespaceReaper,
    obligations: Obligations,
) -> None:
    if Phase.AFTER_CHANGE not in metrics_rehearsal.state.records:
        pytest.skip(
            "not applicable: the metrics rehearsal's phase after_change is not recorded in "
            f"{metrics_rehearsal.state.path}"
        )
    engine = resume_metrics(metrics_rehearsal, api_client, metrics_client, timeouts, freshness_slo, metrics_scope)
    try:
        record = run_after_rollback(engine, metrics_rehearsal.state, drive=metrics_rehearsal.drive)
    finally:
        left = finish_metrics(metrics_rehearsal, namespace_reaper, restore=metrics_rehearsal.drive)
    record.left_behind.extend(left)
    metrics_rehearsal.record(record)
    _verdict(obligations, record, drive=metrics_rehearsal.drive)
