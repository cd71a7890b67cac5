"""Each fault of the reference metrics adapter makes the matching check fail or the matching verdict appear."""

from __future__ import annotations

import datetime

import pytest
from kubernetes import client

from dra_conformance.metrics import api as metrics_api
from dra_conformance.metrics.adapter import MetricsAdapter, wait_available
from dra_conformance.timeouts import Timeouts

pytestmark = pytest.mark.xdist_group("metrics")
# An injected staleness well past the default 60 s SLO.
STALE_SECONDS = 300


def _evidence(api: client.ApiClient) -> metrics_api.Evidence:
    evidence = metrics_api.Evidence()
    evidence.available = {v: metrics_api.apiservice_condition(api, v) for v in metrics_api.VERSIONS}
    # Discovery keeps listing a version whose APIService is unavailable; read samples from an available one.
    usable = [v for v in metrics_api.VERSIONS if evidence.available[v].startswith("True")]
    if usable:
        found = metrics_api.samples(api, usable[0])
        now = datetime.datetime.now(datetime.UTC)
        evidence.lag_p50, evidence.lag_p95 = metrics_api.summarize_lag(metrics_api.lag_seconds(found.values(), now))
    return evidence


def test_stale_samples_break_the_slo_and_hold_autoscaling(
    metrics_adapter: MetricsAdapter, metrics_client: client.ApiClient
) -> None:
    metrics_adapter.set({"staleSeconds": STALE_SECONDS})
    evidence = _evidence(metrics_client)
    assert evidence.lag_p95 is not None and evidence.lag_p95 >= STALE_SECONDS, evidence.to_json()
    # a point-in-time read also holds widening (no 24 h watch), so the stale-lag decision leads, not stands alone
    assert metrics_api.verdict(evidence) == [metrics_api.DECISIONS[1], metrics_api.DECISIONS[3]], evidence.to_json()


def test_missing_samples_are_absent_not_zero(metrics_adapter: MetricsAdapter, metrics_client: client.ApiClient) -> None:
    before = metrics_api.samples(metrics_client, "v1")
    metrics_adapter.set({"missingPods": ["fake-dra/"]})
    after = metrics_api.samples(metrics_client, "v1")
    missing = sorted(set(before) - set(after))
    assert missing and all(key.startswith("pod/fake-dra/") for key in missing), f"missing: {missing}"
    assert not [k for k, s in after.items() if s.cpu_millicores == 0 and s.memory_bytes == 0]


def test_version_disagreement_is_reported_by_parity(
    metrics_adapter: MetricsAdapter, metrics_client: client.ApiClient
) -> None:
    metrics_adapter.set({"v1UsageFactor": 2})
    differences = metrics_api.parity_differences(
        metrics_api.samples(metrics_client, "v1"), metrics_api.samples(metrics_client, "v1beta1"), 0.05
    )
    assert any("cpu" in d for d in differences), f"parity found: {differences}"


def test_serving_only_v1beta1_makes_the_v1_apiservice_unavailable_and_the_verdict_fix_it(
    metrics_adapter: MetricsAdapter,
    metrics_client: client.ApiClient,
    api_client: client.ApiClient,
    timeouts: Timeouts,
) -> None:
    metrics_adapter.set({"served": ["v1beta1"]})
    state = wait_available(api_client, {"v1": False, "v1beta1": True}, timeouts.metrics_available)
    assert state["v1"].startswith("False/FailedDiscoveryCheck"), state
    assert metrics_api.verdict(_evidence(metrics_client))[0] == "fix the metrics implementation first"


def test_unavailable_adapter_marks_both_apiservices_unavailable(
    metrics_adapter: MetricsAdapter,
    metrics_client: client.ApiClient,
    api_client: client.ApiClient,
    timeouts: Timeouts,
) -> None:
    metrics_adapter.set({"unavailable": True})
    state = wait_available(api_client, {"v1": False, "v1beta1": False}, timeouts.metrics_available)
    assert all(value.startswith("False/FailedDiscoveryCheck") for value in state.values()), state
    evidence = metrics_api.Evidence(
        available={v: metrics_api.apiservice_condition(api_client, v) for v in metrics_api.VERSIONS}
    )
    assert metrics_api.verdict(evidence)[0] == "fix the metrics implementation first", evidence.to_json()


def test_invalid_fault_is_refused_in_one_line(metrics_adapter: MetricsAdapter) -> None:
    with pytest.raises(ValueError) as refused:
        metrics_adapter.set({"staleSecs": 5})
    assert "unknown fault key 'staleSecs'" in str(refused.value) and "\n" not in str(refused.value)
