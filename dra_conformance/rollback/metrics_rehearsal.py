"""Rollback rehearsal, metrics.k8s.io v1 -> v1beta1 only -> v1 again, with consumers reading throughout.

Phases: `before` (both versions served and Available, consumers read both), `after_change` (v1's APIService is
gone: removed by the suite when it drives, else by the staging team; v1beta1 still serves its readers and
HPA-style reads), `after_rollback` (v1 is back, the group's APIServices are those of `before`, all Available,
the versions agree, consumers read both again). The judgement is the metrics suite's own
(`dra_conformance.metrics.rollback`). The rehearsal's consumer target is one running pod in a namespace of its own.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits
from dra_conformance.kube.builders import PAUSE_IMAGE, TEST_POD_GRACE_SECONDS
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.metrics import rollback as metrics_rollback
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.metrics.adapter import wait_serving
from dra_conformance.rollback.state import Phase, PhaseRecord, RehearsalState
from dra_conformance.timeouts import Timeouts

REHEARSAL = "metrics-v1-v1beta1"
REMOVED, KEPT = "v1", "v1beta1"
CONSUMER_TARGET = "metrics-consumer-target"
CONSUMER_LABELS = {"app.kubernetes.io/name": "metrics-rollback-consumer-target"}


def now() -> str:
    """A phase's start, for its record."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def not_applicable(metrics_client: client.ApiClient) -> str | None:
    """Why this cluster has no v1 -> v1beta1 rollback to rehearse, or None."""
    served = metrics_reads.served_versions(metrics_client)
    missing = [v for v in (REMOVED, KEPT) if v not in served]
    if missing:
        return (
            f"metrics.k8s.io/{', '.join(missing)} not served (discovery lists {', '.join(served) or 'nothing'}): "
            "there is no v1 -> v1beta1 rollback to rehearse"
        )
    return None


@dataclass(frozen=True)
class MetricsRehearsalSetup:
    """Where the rehearsal's consumer target runs; recorded by `before` and read back by later phases."""

    namespace: str
    pod: str = CONSUMER_TARGET


class MetricsRehearsal:
    """The rehearsal's clients, setup and deadlines."""

    def __init__(
        self,
        admin: client.ApiClient,
        metrics_client: client.ApiClient,
        setup: MetricsRehearsalSetup,
        timeouts: Timeouts,
        slo: float,
        scope: metrics_sampling.SampleScope,
    ) -> None:
        """Work in `setup.namespace`; hold consumers' samples to the freshness SLO `slo`; read samples in `scope`."""
        self.admin, self.metrics_client, self.setup, self.timeouts = admin, metrics_client, setup, timeouts
        self.slo, self.scope = slo, scope

    @property
    def target(self) -> tuple[str, dict[str, str]]:
        """What the HPA-style read selects: the namespace and labels of the consumer target."""
        return self.setup.namespace, CONSUMER_LABELS

    def start_consumer_target(self, *, await_samples: bool = True) -> None:
        """Run the pod an HPA would scale, and (with `await_samples`) wait until v1beta1 serves its PodMetrics."""
        core = client.CoreV1Api(self.admin)
        core.create_namespaced_pod(
            self.setup.namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": self.setup.pod, "labels": CONSUMER_LABELS},
                "spec": {
                    "terminationGracePeriodSeconds": TEST_POD_GRACE_SECONDS,
                    "containers": [{"name": "app", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "100m"}}}],
                },
            },
        )
        waits.until(
            lambda: core.read_namespaced_pod(self.setup.pod, self.setup.namespace).status.phase,
            lambda phase: phase == "Running",
            timeout=self.timeouts.pod_scheduled + self.timeouts.pod_running,
            what=f"consumer target pod {self.setup.namespace}/{self.setup.pod} Running",
            describe=str,
        )
        if not await_samples:
            return
        waits.until(
            lambda: metrics_rollback.hpa_style_read(self.metrics_client, KEPT, *self.target),
            bool,
            timeout=self.timeouts.metrics_first_sample,
            what=f"PodMetrics of {self.setup.namespace}/{self.setup.pod} in {KEPT}",
            describe=lambda found: [s.key for s in found],
        )

    def consumers(self, record: PhaseRecord, *versions: str) -> None:
        """Record what a consumer of each version would miss."""
        for version in versions:
            record.problems.extend(
                metrics_rollback.consumer_problems(self.metrics_client, version, self.target, self.slo, self.scope)
            )

    def restore_if_removed(self, before: PhaseRecord) -> bool:
        """Serve v1 again from `before`'s copy when it is missing (a rehearsal that stopped half-way)."""
        saved = before.facts.get("removed_apiservice")
        if not saved or metrics_rollback.apiservice_name(REMOVED) in metrics_rollback.group_apiservices(self.admin):
            return False
        metrics_rollback.restore_version(self.admin, self.metrics_client, saved, self.timeouts.metrics_available)
        return True


def _apiservice_drift(record: PhaseRecord, expected: dict[str, str], now_seen: dict[str, str], when: str) -> None:
    """APIServices of the group other than `expected` linger (left behind); expected ones must be Available."""
    for name in sorted(set(now_seen) - set(expected)):
        record.left_behind.append(f"APIService {name} ({now_seen[name]}) lingers {when}")
    for name in sorted(expected):
        if name not in now_seen:
            record.problems.append(f"APIService {name} missing {when}")
        elif not now_seen[name].startswith("True"):
            record.problems.append(f"APIService {name} not Available {when}: {now_seen[name]}")


def _both_available(services: dict[str, str]) -> bool:
    """Whether the APIServices of both versions are Available (reads through the aggregator can answer)."""
    return all(services.get(metrics_rollback.apiservice_name(v), "").startswith("True") for v in (REMOVED, KEPT))


def _compare_versions(rehearsal: MetricsRehearsal, record: PhaseRecord, services: dict[str, str]) -> None:
    """Parity of v1 and v1beta1, when both are Available; otherwise the APIService problems carry the finding."""
    if not _both_available(services):
        record.facts["parity"] = f"not compared: APIServices {services}"
        return
    record.facts["parity"] = metrics_rollback.parity_problems(rehearsal.metrics_client, rehearsal.scope)
    record.problems.extend(f"v1 and v1beta1 disagree: {p}" for p in record.facts["parity"][:10])


def run_before(rehearsal: MetricsRehearsal) -> PhaseRecord:
    """Both versions served and Available; consumers read both; v1's APIService is saved for the rollback."""
    record = PhaseRecord(Phase.BEFORE, now())
    start = time.monotonic()
    record.facts["setup"] = asdict(rehearsal.setup)
    services = metrics_rollback.group_apiservices(rehearsal.admin)
    record.facts["apiservices"] = services
    for version in (REMOVED, KEPT):
        if metrics_rollback.apiservice_name(version) not in services:
            record.problems.append(f"APIService {metrics_rollback.apiservice_name(version)} missing before the change")
    record.problems.extend(
        f"APIService {name} not Available before the change: {condition}"
        for name, condition in services.items()
        if not condition.startswith("True")
    )
    if metrics_rollback.apiservice_name(REMOVED) in services:
        record.facts["removed_apiservice"] = metrics_rollback.saved_apiservice(rehearsal.admin, REMOVED)
    # An unavailable v1beta1 serves no PodMetrics: its APIService problem above carries that, without the wait.
    kept_available = services.get(metrics_rollback.apiservice_name(KEPT), "").startswith("True")
    try:
        rehearsal.start_consumer_target(await_samples=kept_available)
    except WaitTimeout as error:
        record.problems.append(f"consumer target not served: {error}")
    rehearsal.consumers(record, REMOVED, KEPT)
    _compare_versions(rehearsal, record, services)
    record.seconds = round(time.monotonic() - start, 3)
    return record


def run_after_change(rehearsal: MetricsRehearsal, state: RehearsalState, *, drive: bool) -> PhaseRecord:
    """v1 is gone (nothing of it lingers) and v1beta1 still serves its readers and HPA-style reads."""
    before = state.require(Phase.AFTER_CHANGE, Phase.BEFORE)
    record = PhaseRecord(Phase.AFTER_CHANGE, now())
    start = time.monotonic()
    if drive:
        metrics_rollback.remove_version(
            rehearsal.admin, rehearsal.metrics_client, REMOVED, rehearsal.timeouts.metrics_available
        )
        record.facts["change_seconds"] = round(time.monotonic() - start, 3)
    else:
        try:  # the staging team's change may have just been made: discovery follows within the deadline
            waits.until(
                lambda: metrics_reads.served_versions(rehearsal.metrics_client),
                lambda served: REMOVED not in served,
                timeout=rehearsal.timeouts.metrics_available,
                what=f"{metrics_reads.GROUP}/{REMOVED} gone from discovery",
                describe=str,
            )
        except WaitTimeout:
            pass  # judged below: discovery still lists it
    record.facts["driven_by"] = "suite" if drive else "staging team"
    record.problems.extend(metrics_rollback.rolled_back_problems(rehearsal.admin, rehearsal.metrics_client))
    services = metrics_rollback.group_apiservices(rehearsal.admin)
    record.facts["apiservices"] = services
    expected = {n: s for n, s in before.facts["apiservices"].items() if n != metrics_rollback.apiservice_name(REMOVED)}
    removed_name = metrics_rollback.apiservice_name(REMOVED)
    _apiservice_drift(
        record, expected, {n: s for n, s in services.items() if n != removed_name}, "after the change"
    )  # a lingering v1 is already a problem above
    rehearsal.consumers(record, KEPT)
    record.seconds = round(time.monotonic() - start, 3)
    return record


def run_after_rollback(rehearsal: MetricsRehearsal, state: RehearsalState, *, drive: bool) -> PhaseRecord:
    """v1 is back: the group's APIServices are those of `before`, all Available, versions agree, consumers read."""
    before = state.require(Phase.AFTER_ROLLBACK, Phase.BEFORE)
    state.require(Phase.AFTER_ROLLBACK, Phase.AFTER_CHANGE)
    record = PhaseRecord(Phase.AFTER_ROLLBACK, now())
    start = time.monotonic()
    if drive:
        saved: dict[str, Any] | None = before.facts.get("removed_apiservice")
        if saved is None:
            record.problems.append("before recorded no v1 APIService to restore")
        else:
            # Versions that were not Available before the change are not awaited now: that would only run out the
            # deadline; the drift check below judges them against `before`.
            serving_before = _both_available(before.facts.get("apiservices") or {})
            try:
                metrics_rollback.restore_version(
                    rehearsal.admin,
                    rehearsal.metrics_client,
                    saved,
                    rehearsal.timeouts.metrics_available,
                    wait=serving_before,
                )
            except WaitTimeout as error:  # restored, but not serving within the deadline: judged as such
                record.problems.append(f"v1 and v1beta1 not both serving after the rollback: {error}")
            record.facts["rollback_change_seconds"] = round(time.monotonic() - start, 3)
    else:
        try:  # the staging team's rollback may have just been made: Available, answering, discovered, in turn
            wait_serving(rehearsal.metrics_client, metrics_reads.VERSIONS, rehearsal.timeouts.metrics_available)
        except WaitTimeout as error:
            record.problems.append(f"v1 and v1beta1 not both serving after the rollback: {error}")
    record.facts["driven_by"] = "suite" if drive else "staging team"
    services = metrics_rollback.group_apiservices(rehearsal.admin)
    record.facts["apiservices"] = services
    _apiservice_drift(record, before.facts["apiservices"], services, "after the rollback")
    served = metrics_reads.served_versions(rehearsal.metrics_client)
    missing = [v for v in (REMOVED, KEPT) if v not in served]
    if missing:
        record.problems.append(f"discovery does not list {missing} after the rollback: {served}")
    else:
        _compare_versions(rehearsal, record, services)
    rehearsal.consumers(record, REMOVED, KEPT)
    record.seconds = round(time.monotonic() - start, 3)
    return record
