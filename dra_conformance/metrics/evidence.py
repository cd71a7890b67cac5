"""What the metrics verdict is decided from: availability and sample age at one read, the consumers, the watch."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_conformance.kube.audit_log import events as audit_log_events
from dra_conformance.metrics.availability import Availability
from dra_conformance.metrics.reads import GROUP, SUITE_USER_AGENT, utc_now
from dra_conformance.metrics.samples import SampleScope, lag_seconds, samples, summarize_lag

if TYPE_CHECKING:
    from dra_conformance.metrics.watch import WatchSummary

# Default freshness SLO: a sample older than this must not drive autoscaling.
FRESHNESS_SLO = 60.0
# The last Kubernetes minor whose HPA controller (in kube-controller-manager) reads only metrics.k8s.io/v1beta1, as
# measured here by the consumer inventory on 1.37 (suites/metrics). The version skew policy keeps the
# controller-manager no newer than kube-apiserver, so an API server at or below this minor implies it.
HPA_READS_ONLY_V1BETA1_UNTIL_MINOR = 37
HPA_RULE = (
    "the HPA controller of kube-controller-manager <= 1.{minor} reads only metrics.k8s.io/v1beta1, and the "
    "controller-manager is never newer than the API server ({server})"
)


@dataclass
class Evidence:
    """What the verdict is decided from."""

    available: dict[str, str] = field(default_factory=dict)
    # The Available condition's message of each version that is not Available.
    messages: dict[str, str] = field(default_factory=dict)
    lag_p50: float | None = None
    lag_p95: float | None = None
    slo: float = FRESHNESS_SLO
    new_sample_seen: bool | None = None
    v1beta1_only_consumers: list[str] = field(default_factory=list)
    # kube-apiserver's /version gitVersion (e.g. "v1.37.2"); None when it was not read.
    server_version: str | None = None
    # Availability and lag sampled over a period (--dra-metrics-watch); None when the run did not watch.
    watch: WatchSummary | None = None

    def needs_v1beta1(self) -> bool:
        """Whether v1beta1 must stay served: a consumer reads only it, or the HPA rule applies."""
        return bool(self.v1beta1_only_consumers) or self.hpa_needs_v1beta1() is not None

    def stability(self) -> str:
        """What the evidence says about the stable availability widening needs."""
        if self.watch is None:
            return (
                "not measured for widening: no --dra-metrics-watch (24h measures availability ratio and sample age; "
                "the run's own probes only find outages)"
            )
        return self.watch.statement(self.watched_versions(), self.slo)

    def watched_versions(self) -> list[str]:
        """The versions whose availability widening rests on: v1, and v1beta1 while it must stay served."""
        return ["v1", "v1beta1"] if self.needs_v1beta1() else ["v1"]

    def hpa_needs_v1beta1(self) -> str | None:
        """The rule that keeps v1beta1 served whatever objects exist now, or None when it does not apply."""
        if self.server_version is None:
            return None
        try:
            minor = int(self.server_version.removeprefix("v").split(".")[1].rstrip("+"))
        except (IndexError, ValueError):
            return None
        if minor > HPA_READS_ONLY_V1BETA1_UNTIL_MINOR:
            return None
        return HPA_RULE.format(minor=HPA_READS_ONLY_V1BETA1_UNTIL_MINOR, server=self.server_version)

    def to_json(self) -> str:
        """JSON for the report."""
        return json.dumps(asdict(self), indent=2)


def point_in_time_evidence(
    api: client.ApiClient, availability: Availability, slo: float, scope: SampleScope
) -> Evidence:
    """The verdict's evidence from one availability read and the samples in `scope` of the preferred usable version.

    Nothing is read from an unavailable version; a version that serves no sample leaves the lag unknown (None),
    never zero.
    """
    evidence = Evidence(slo=slo, available=availability.conditions())
    evidence.messages = {s.version: s.message for s in availability.unavailable() if s.message}
    for version in availability.usable()[:1]:
        try:
            found = samples(api, version, scope)
        except ApiException:
            continue
        lags = lag_seconds(found.values(), utc_now())
        if lags:
            evidence.lag_p50, evidence.lag_p95 = summarize_lag(lags)
    return evidence


def consumer_inventory(
    audit_log: Path, *, exclude_agents: tuple[str, ...] = (SUITE_USER_AGENT,)
) -> dict[str, list[str]]:
    """Who read metrics.k8s.io resources successfully (not discovery) and in which versions: consumer -> versions."""
    consumers: dict[str, set[str]] = {}
    for event in audit_log_events(audit_log, containing=GROUP):
        reference = event.get("objectRef") or {}
        if reference.get("apiGroup") != GROUP or not reference.get("resource"):
            continue
        if not 200 <= int((event.get("responseStatus") or {}).get("code", 0)) < 300:
            continue  # a denied or failed request is not consumption
        agent = str(event.get("userAgent", "")).split(" ", 1)[0]
        if agent.startswith(exclude_agents):
            continue
        consumer = f"{event['user']['username']} ({agent.split('/', 1)[0] if agent else 'no user agent'})"
        consumers.setdefault(consumer, set()).add(reference.get("apiVersion", "?"))
    return {consumer: sorted(versions) for consumer, versions in sorted(consumers.items())}


def v1beta1_only(inventory: dict[str, list[str]]) -> list[str]:
    """Consumers that read only v1beta1."""
    return [consumer for consumer, versions in inventory.items() if versions == ["v1beta1"]]
