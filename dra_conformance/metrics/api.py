"""Reading the resource Metrics API (metrics.k8s.io) and judging it: availability, parity, freshness, verdict.

Every read goes through the aggregation layer with a client whose user agent names this suite, so the consumer
inventory from the audit log can leave the suite's own reads out.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from dra_conformance import __version__
from dra_conformance.errors import SuiteForbidden, WaitTimeout
from dra_conformance.kube import discovery, waits
from dra_conformance.kube.audit_log import events as audit_log_events
from dra_conformance.kube.client import raw_request, sibling_client
from dra_conformance.model.stats import percentile

if TYPE_CHECKING:
    from dra_conformance.metrics.watch import WatchSummary

GROUP = "metrics.k8s.io"
FORBIDDEN = 403
VERSIONS = ("v1", "v1beta1")
SUITE_USER_AGENT = f"dra-conformance/{__version__}"
# Default freshness SLO: a sample older than this must not drive autoscaling.
FRESHNESS_SLO = 60.0
# Relative difference of usage values two versions may show for the same object at the same timestamp.
PARITY_TOLERANCE = 0.05
REQUEST_TIMEOUT = 10.0
# Availability ratio a version needs over a watch (--dra-metrics-watch) to count as stable: 99.9 % allows ~86 s of a
# 24 h watch (an aggregator re-probe, an adapter restart), not an outage.
STABLE_AVAILABILITY_RATIO = 0.999

DECISIONS = (
    # Over a watch; at the verdict's read the decision names what to fix: "fix first: v1 unavailable (<reason>)".
    "fix the metrics implementation first",
    "hold autoscaling changes and fix the pipeline",
    "keep serving v1beta1 alongside v1 (dual-serve)",
    "hold widening until 24 h of stable availability is shown",
    "safe to move consumers to v1",
)
# The last Kubernetes minor whose HPA controller (in kube-controller-manager) reads only metrics.k8s.io/v1beta1, as
# measured here by the consumer inventory on 1.37 (suites/metrics). The version skew policy keeps the
# controller-manager no newer than kube-apiserver, so an API server at or below this minor implies it.
HPA_READS_ONLY_V1BETA1_UNTIL_MINOR = 37
# The decision an unavailable version makes at the verdict's read: "fix first: v1 unavailable (FailedDiscoveryCheck)".
FIX_FIRST = "fix first"
# The condition of a version that has no APIService (apiservice_condition), and the reason it is unavailable then.
MISSING = "missing"
NO_APISERVICE = "no APIService"
# The check (suites/metrics) that judges each version's availability; the checks it blocks name it.
AVAILABILITY_CHECK = "test_served_version_has_an_available_apiservice_and_serves_node_metrics"
# How often the up-front availability read polls an APIService that is not Available yet.
AVAILABILITY_POLL = 1.0
HPA_RULE = (
    "the HPA controller of kube-controller-manager <= 1.{minor} reads only metrics.k8s.io/v1beta1, and the "
    "controller-manager is never newer than the API server ({server})"
)


def suite_client(admin: client.ApiClient) -> client.ApiClient:
    """A copy of the admin client that identifies itself as this suite."""
    copy = sibling_client(admin)
    copy.user_agent = SUITE_USER_AGENT
    return copy


def _get(api: client.ApiClient, path: str, query: dict[str, str] | None = None) -> tuple[int, Any]:
    status, data = raw_request(api, "GET", path, query=list((query or {}).items()), timeout=REQUEST_TIMEOUT)
    try:
        return status, json.loads(data or b"{}")
    except ValueError:
        return status, {"raw": data.decode(errors="replace")}


def served_versions(api: client.ApiClient) -> list[str]:
    """Versions of metrics.k8s.io that discovery lists (empty if the group is not served at all)."""
    return discovery.served_versions(api, GROUP, timeout=REQUEST_TIMEOUT)


@dataclass(frozen=True)
class VersionAvailability:
    """One version of metrics.k8s.io at a read: listed by discovery or not, and its APIService's Available condition."""

    version: str
    # Discovery lists it (the cluster claims to serve it).
    served: bool
    # "True/Passed", "False/FailedDiscoveryCheck", "missing" (no APIService) or "no Available condition".
    condition: str
    message: str = ""
    # When the condition last changed status (None without one).
    since: datetime.datetime | None = None

    @property
    def available(self) -> bool:
        """Its APIService is Available."""
        return self.condition.startswith("True")

    @property
    def registered(self) -> bool:
        """It has an APIService."""
        return self.condition != MISSING

    @property
    def reason(self) -> str:
        """Why it is not Available ("" when it is)."""
        return unavailable_reason(self.condition) or ""

    def settled(self, now: datetime.datetime, deadline: float) -> bool:
        """Whether waiting could not make it Available within `deadline`.

        It is Available, it has no APIService, or it has been unavailable longer than the deadline already (a
        pipeline warming up turns Available within it).
        """
        if self.available or not self.registered:
            return True
        return self.since is not None and (now - self.since).total_seconds() >= deadline

    def describe(self) -> str:
        """One line: "metrics.k8s.io/v1 unavailable (FailedDiscoveryCheck: <message>)"."""
        detail = f"{self.reason}: {self.message}" if self.message else self.reason
        return f"{GROUP}/{self.version} unavailable ({detail})"


def unavailable_reason(condition: str) -> str | None:
    """The reason in an Available condition as `apiservice_condition` writes it; None when it is True."""
    if condition.startswith("True"):
        return None
    if condition == MISSING:
        return NO_APISERVICE
    status, _, reason = condition.partition("/")
    return reason or status


def apiservice_state(
    api: client.ApiClient, version: str, *, served: bool = False, timeout: float | None = None
) -> VersionAvailability:
    """The `Available` condition of <version>.metrics.k8s.io, its message and since when it holds."""
    try:
        service = client.ApiregistrationV1Api(api).read_api_service(
            f"{version}.{GROUP}", _request_timeout=timeout or REQUEST_TIMEOUT
        )
    except ApiException as error:
        if error.status == 404:
            return VersionAvailability(version, served, MISSING)
        raise
    conditions = (service.status.conditions if service.status else None) or []
    condition = next((c for c in conditions if c.type == "Available"), None)
    if condition is None:
        return VersionAvailability(version, served, "no Available condition")
    since = condition.last_transition_time
    return VersionAvailability(
        version,
        served,
        f"{condition.status}/{condition.reason}",
        " ".join(str(condition.message or "").split()),
        since if isinstance(since, datetime.datetime) else None,
    )


def apiservice_condition(api: client.ApiClient, version: str) -> str:
    """The `Available` condition of <version>.metrics.k8s.io as "True/Passed", or "missing"."""
    return apiservice_state(api, version).condition


@dataclass(frozen=True)
class Availability:
    """Every version of metrics.k8s.io as read once, up front, for the checks of a run to share."""

    # What discovery lists, the preferred version first.
    served: tuple[str, ...]
    versions: dict[str, VersionAvailability]
    # Seconds the read waited for versions still turning Available.
    waited: float = 0.0

    def conditions(self) -> dict[str, str]:
        """Each version's Available condition ("True/Passed", "missing"), as the verdict's evidence holds them."""
        return {v: state.condition for v, state in self.versions.items()}

    def unavailable(self) -> list[VersionAvailability]:
        """Versions discovery lists or an APIService registers that are not Available."""
        return [s for s in self.versions.values() if (s.served or s.registered) and not s.available]

    def usable(self) -> list[str]:
        """Served versions that are Available, the one consumers prefer (v1) first."""
        ordered = sorted(self.served, key=lambda version: version != "v1")
        return [v for v in ordered if v in self.versions and self.versions[v].available]


def read_availability(
    api: client.ApiClient,
    deadline: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> Availability:
    """Each version's availability, once every served or registered one is Available or settled, or at `deadline`.

    A version that has been unavailable longer than `deadline` already is not waited for: nothing suggests it is
    warming up. The state at the deadline is returned, never an error: unavailability is what the checks judge.
    """
    start = clock()
    while True:
        served = served_versions(api)
        state = Availability(
            tuple(served),
            {v: apiservice_state(api, v, served=v in served) for v in VERSIONS},
            round(clock() - start, 3),
        )
        now = utc_now()
        if all(s.settled(now, deadline) for s in state.unavailable()) or clock() - start >= deadline:
            return state
        sleep(min(AVAILABILITY_POLL, max(0.0, deadline - (clock() - start))))


@dataclass(frozen=True)
class Sample:
    """One NodeMetrics or PodMetrics sample (pods summed over containers)."""

    kind: str
    key: str
    timestamp: datetime.datetime
    window: str
    cpu_millicores: float
    memory_bytes: float


def utc_now() -> datetime.datetime:
    """Now, in UTC (what sample ages are measured against)."""
    return datetime.datetime.now(datetime.UTC)


def get_json(api: client.ApiClient, path: str, query: dict[str, str] | None = None) -> tuple[int, Any]:
    """HTTP status and JSON body of a GET through the aggregator."""
    return _get(api, path, query)


def parse_sample(kind: str, item: dict[str, Any]) -> Sample:
    """A NodeMetrics ("node") or PodMetrics ("pod") item as a sample."""
    return _sample(kind, item)


def _sample(kind: str, item: dict[str, Any]) -> Sample:
    meta = item["metadata"]
    usages = [item["usage"]] if kind == "node" else [c["usage"] for c in item.get("containers", [])]
    return Sample(
        kind,
        meta["name"] if kind == "node" else f"{meta['namespace']}/{meta['name']}",
        datetime.datetime.fromisoformat(item["timestamp"].replace("Z", "+00:00")),
        item.get("window", ""),
        # Millicores and bytes; the client's parser knows every suffix (n, u, m, k, M, ..., Ki, ..., Pi, Ei).
        float(sum(parse_quantity(u.get("cpu", "0")) for u in usages) * 1000),
        float(sum(parse_quantity(u.get("memory", "0")) for u in usages)),
    )


# Nodes whose samples the checks judge: a few are enough to judge an implementation, and the count must not grow
# with the cluster (on 1,000 nodes a run reads what it reads on 4).
SCOPE_NODES = 4
# Running pods on those nodes whose samples the checks judge, at most, each read by name. Listing PodMetrics per
# namespace made the implementation list every pod of the namespace: bench/scale's unrelated workloads on the scoped
# nodes made those answers 28x larger at 1,000 nodes, and a production namespace can hold thousands of pods.
SCOPE_PODS = 16


@dataclass(frozen=True)
class SampleScope:
    """Which samples the checks read: NodeMetrics of a few named nodes, PodMetrics of a few Running pods on them.

    Every read selects by name or node, never the whole cluster or a namespace: neither the suite nor the
    implementation answering it (which lists what it is asked for) does more work on a larger cluster.
    """

    nodes: tuple[str, ...]

    @classmethod
    def of_cluster(cls, real_nodes: Sequence[str], nodes: Sequence[str]) -> SampleScope:
        """The real kubelets first (their samples are measured, not synthesized), then nodes in name order."""
        return cls(tuple(dict.fromkeys([*real_nodes, *sorted(nodes)]))[:SCOPE_NODES])

    def describe(self) -> str:
        """One line for messages: which samples were read."""
        return f"NodeMetrics of {list(self.nodes)} and PodMetrics of up to {SCOPE_PODS} Running pods on them"


def running_pods(api: client.ApiClient, nodes: Iterable[str]) -> set[str]:
    """The Running pods on `nodes` as "<namespace>/<name>" (one list per node, selected by field)."""
    found = set()
    for node in nodes:
        query = {"fieldSelector": f"spec.nodeName={node},status.phase=Running"}
        body = _ok(api, "/api/v1/pods", query)
        found |= {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in body.get("items", [])}
    return found


def samples(api: client.ApiClient, version: str, scope: SampleScope) -> dict[str, Sample]:
    """The node and pod samples `version` serves within `scope`, by "node/<name>" and "pod/<ns>/<name>".

    A version that does not answer raises `ApiException`; a node or pod it has no sample for is left out (metrics
    pipelines skip objects they could not scrape).
    """
    return samples_of_versions(api, (version,), scope)[version]


def samples_of_versions(
    api: client.ApiClient, versions: Sequence[str], scope: SampleScope
) -> dict[str, dict[str, Sample]]:
    """Each version's samples (as `samples`) of the same objects, by version.

    The pods are listed once, and each object is read from every version back to back: pods that other checks
    create and delete make the versions differ only within one object's reads (milliseconds), not within a whole
    read of each version (seconds on a busy cluster, where the parity check waited 10 s for a read without churn).
    """
    for version in versions:
        _ok(api, f"/apis/{GROUP}/{version}")
    paths = [("node", f"nodes/{node}") for node in scope.nodes]
    for pod in sorted(running_pods(api, scope.nodes))[:SCOPE_PODS]:
        namespace, name = pod.split("/", 1)
        paths.append(("pod", f"namespaces/{namespace}/pods/{name}"))
    found: dict[str, dict[str, Sample]] = {version: {} for version in versions}
    for kind, path in paths:
        for version in versions:
            full = f"{GROUP}/{version}/{path}"
            status, body = _get(api, f"/apis/{full}")
            if status == 404:
                continue
            _raise_unless_ok(status, body, full)
            sample = _sample(kind, body)
            found[version][f"{kind}/{sample.key}"] = sample
    return found


def _ok(api: client.ApiClient, path: str, query: dict[str, str] | None = None) -> Any:
    status, body = _get(api, path, query)
    _raise_unless_ok(status, body, path)
    return body


def _raise_unless_ok(status: int, body: Any, what: str) -> None:
    if status != 200:
        message = body.get("message", body) if isinstance(body, dict) else body
        if status == FORBIDDEN:  # the suite's own read: its identity lacks a right, which no wait will change
            raise SuiteForbidden(
                f"GET {what}: {message}; the identity the suite runs as needs the rules of "
                "dra_conformance/kube/ci-clusterrole.yaml (in a pod: dra-conformance sonobuoy-plugin --rbac)"
            )
        raise ApiException(status=status, reason=f"GET {what}: {message}")


def get_status(api: client.ApiClient, path: str) -> int:
    """HTTP status of a GET (for checks that a removed version really answers 404)."""
    return _get(api, path)[0]


def parity_differences(first: dict[str, Sample], second: dict[str, Sample], tolerance: float) -> list[str]:
    """Where two versions disagree: objects only one has, timestamps, windows, or usage beyond `tolerance`."""
    problems = [f"only in the first: {key}" for key in sorted(set(first) - set(second))]
    problems += [f"only in the second: {key}" for key in sorted(set(second) - set(first))]
    for key in sorted(set(first) & set(second)):
        a, b = first[key], second[key]
        if a.timestamp != b.timestamp or a.window != b.window:
            problems.append(f"{key}: timestamp/window {a.timestamp}/{a.window} vs {b.timestamp}/{b.window}")
        for what, x, y in (("cpu", a.cpu_millicores, b.cpu_millicores), ("memory", a.memory_bytes, b.memory_bytes)):
            if abs(x - y) > tolerance * max(abs(x), abs(y), 1e-9):
                problems.append(f"{key}: {what} {x:g} vs {y:g}")
    return problems


def lag_seconds(found: Iterable[Sample], now: datetime.datetime) -> list[float]:
    """How old each sample is."""
    return [(now - sample.timestamp).total_seconds() for sample in found]


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


def unavailable_versions(evidence: Evidence) -> dict[str, str]:
    """Versions unavailable at the verdict's read, with the reason.

    v1 always counts (consumers move to it); another version once it is registered: a registered APIService that
    fails discovery breaks its readers, and namespace deletion cluster-wide.
    """
    found = {}
    for version in VERSIONS:
        condition = evidence.available.get(version, MISSING)
        reason = unavailable_reason(condition)
        if reason is not None and (version == "v1" or condition != MISSING):
            found[version] = reason
    return found


def fix_first(evidence: Evidence) -> str | None:
    """The first decision when a version is unavailable at the read, e.g. "fix first: v1 unavailable (<reason>)"."""
    unavailable = unavailable_versions(evidence)
    if not unavailable:
        return None
    return f"{FIX_FIRST}: " + "; ".join(f"{v} unavailable ({reason})" for v, reason in unavailable.items())


def asks_fix(decisions: Iterable[str]) -> bool:
    """Whether the verdict asks to fix the implementation first (at the read or over the watch)."""
    return any(d == DECISIONS[0] or d.startswith(f"{FIX_FIRST}:") for d in decisions)


def verdict(evidence: Evidence) -> list[str]:
    """The operator's decisions that apply, most urgent first (the last row only when nothing else applies).

    A version unavailable at the read makes the first decision "fix first: <version> unavailable (<reason>)".
    A watch adds its figures: a needed version available below the stable ratio over the watch needs a fix; lag
    p95 over the SLO at any version holds autoscaling. Widening needs 24 h of stable availability watched.
    """
    decisions = []
    watch = evidence.watch
    needed = evidence.watched_versions()
    unavailable_in_watch = watch is not None and any(watch.ratio(v) < STABLE_AVAILABILITY_RATIO for v in needed)
    fix = fix_first(evidence)
    if fix is not None:
        decisions.append(fix)
    elif unavailable_in_watch:
        decisions.append(DECISIONS[0])
    stale = evidence.lag_p95 is not None and evidence.lag_p95 > evidence.slo
    stale_in_watch = watch is not None and any(
        w.lag_p95 is not None and w.lag_p95 > evidence.slo for w in watch.versions.values()
    )
    if stale or stale_in_watch or evidence.new_sample_seen is False:
        decisions.append(DECISIONS[1])
    if evidence.needs_v1beta1():
        decisions.append(DECISIONS[2])
    if watch is None or not watch.stable(needed, evidence.slo):
        decisions.append(DECISIONS[3])
    return decisions or [DECISIONS[4]]


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


def summarize_lag(values: list[float]) -> tuple[float, float]:
    """(p50, p95) of lags; (0, 0) for none."""
    if not values:
        return 0.0, 0.0
    return percentile(values, 0.5), percentile(values, 0.95)


def wait_answering(
    api: client.ApiClient, versions: Iterable[str], timeout: float, *, max_interval: float = waits.POLL_MAX_INTERVAL
) -> None:
    """Wait until every version answers through the aggregator (its resource list, proxied to the implementation).

    The aggregator's proxy follows an APIService's Available condition through an informer, so right after the
    condition turns True it can still answer 503 for a moment. The resource list, not a NodeMetrics list: that
    would list every node of the cluster.
    """
    paths = {version: f"/apis/{GROUP}/{version}" for version in versions}
    waits.until(
        lambda: {v: get_status(api, p) for v, p in paths.items()},
        lambda codes: set(codes.values()) == {200},
        timeout=timeout,
        what=f"{GROUP} {sorted(paths)} answering through the aggregator",
        describe=str,
        max_interval=max_interval,
    )


AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def aggregated_discovery_versions(api: client.ApiClient) -> list[str]:
    """Versions of metrics.k8s.io that aggregated discovery (what kubectl and controllers read) lists as Current."""
    _, data = raw_request(api, "GET", "/apis", headers={"Accept": AGGREGATED_DISCOVERY}, timeout=REQUEST_TIMEOUT)
    document = json.loads(data)
    for group in document.get("items", []):
        if group["metadata"]["name"] == GROUP:
            return [v["version"] for v in group.get("versions", []) if v.get("freshness", "Current") == "Current"]
    return []


def wait_discovered(api: client.ApiClient, versions: Iterable[str], timeout: float) -> None:
    """Wait until aggregated discovery lists every version as Current again.

    Discovery is refreshed asynchronously after an APIService recovers; a consumer that looks earlier picks an
    older version.
    """
    wanted = set(versions)
    waits.until(
        lambda: aggregated_discovery_versions(api),
        lambda listed: wanted <= set(listed),
        timeout=timeout,
        what=f"aggregated discovery listing {GROUP} {sorted(wanted)}",
        describe=str,
    )


def preferred_version(served: list[str]) -> str:
    """The version a consumer that knows both would read: v1 when served."""
    return "v1" if "v1" in served else served[0]


def wait_first_node_samples(api: client.ApiClient, version: str, scope: SampleScope, timeout: float) -> None:
    """Wait until `version` serves its first NodeMetrics in `scope` (a pipeline warming up is not wrong).

    `WaitTimeout` if it does not.
    """
    waits.until(
        lambda: samples(api, version, scope),
        lambda found: any(key.startswith("node/") for key in found),
        timeout=timeout,
        what=f"first NodeMetrics of {list(scope.nodes)} from {GROUP}/{version}",
        describe=lambda found: sorted(found),
        retry_on=(ApiException,),
    )


class SampleGate:
    """Whether a check can read samples of some versions, decided from the up-front availability read.

    A version unavailable at that read blocks at once: the availability check carries the finding and no check
    waits its deadline for samples that cannot come. An Available version is waited for its first node samples
    once per run; a version that served none within the deadline blocks the checks after it at once.
    """

    def __init__(
        self, api: client.ApiClient, availability: Availability, scope: SampleScope, first_sample_timeout: float
    ) -> None:
        """Gate reads of `api` by `availability`; wait at most `first_sample_timeout` for first samples in `scope`."""
        self.api, self.availability, self.scope, self.timeout = api, availability, scope, first_sample_timeout
        # Version -> None once its first node samples came, or the wait's error when they did not.
        self.first: dict[str, str | None] = {}

    def first_samples(self, version: str) -> str | None:
        """None once `version` served node samples (waited for once per run), else why it did not."""
        if version not in self.first:
            try:
                wait_first_node_samples(self.api, version, self.scope, self.timeout)
                self.first[version] = None
            except WaitTimeout as error:
                self.first[version] = str(error)
        return self.first[version]

    def blocked(self, versions: Sequence[str]) -> str | None:
        """Why samples of `versions` cannot be read, naming the check that carries the finding; None if they can."""
        states = [self.availability.versions.get(v) or VersionAvailability(v, False, MISSING) for v in versions]
        unavailable = [s for s in states if not s.available]
        if unavailable:
            checks = ", ".join(f"{AVAILABILITY_CHECK}[{s.version}]" for s in unavailable)
            return (
                "; ".join(s.describe() for s in unavailable) + f" at the run's availability read; the availability "
                f"check {checks} carries the finding"
            )
        for version in versions:
            error = self.first_samples(version)
            if error is not None:
                return (
                    f"{GROUP}/{version} served no NodeMetrics: {error}; the availability check "
                    f"{AVAILABILITY_CHECK}[{version}] carries the finding"
                )
        return None
