"""The verdict follows the operator's decision table; quantities and the audit inventory parse correctly.

An unavailable version makes the verdict "fix first: <version> unavailable (<reason>)", decided from the run's one
availability read, and the checks that need its samples are blocked at once instead of waiting their deadlines.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.errors import WaitTimeout
from dra_conformance.metrics import availability as version_availability
from dra_conformance.metrics import decisions as metrics_decisions
from dra_conformance.metrics import evidence as metrics_evidence
from dra_conformance.metrics import reads as metrics_reads
from dra_conformance.metrics import sample_gate
from dra_conformance.metrics import samples as metrics_sampling
from dra_conformance.metrics.availability import Availability, VersionAvailability
from dra_conformance.metrics.decisions import DECISIONS, verdict
from dra_conformance.metrics.evidence import Evidence
from dra_conformance.metrics.verdict import render_markdown, summarize_verdict, verdict_record

SCOPE = metrics_sampling.SampleScope(("node-0",))
HEALTHY = {"v1": "True/Passed", "v1beta1": "True/Passed"}
FROZEN = "False/FailedDiscoveryCheck"
# What the aggregator writes when the adapter does not answer its probe (a frozen process).
FROZEN_MESSAGE = (
    'failing or missing response from https://127.0.0.1:40123/apis/metrics.k8s.io/v1: Get "https://127.0.0.1:40123'
    '/apis/metrics.k8s.io/v1": context deadline exceeded'
)
V1_FIX = "fix first: v1 unavailable (FailedDiscoveryCheck)"


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        (Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True), [DECISIONS[3]]),
        (
            Evidence(available={"v1": "missing", "v1beta1": "True/Passed"}),
            ["fix first: v1 unavailable (no APIService)", DECISIONS[3]],
        ),
        (Evidence(available={"v1": FROZEN}), [V1_FIX, DECISIONS[3]]),
        (Evidence(available=HEALTHY, lag_p95=61.0), [DECISIONS[1], DECISIONS[3]]),
        (Evidence(available=HEALTHY, new_sample_seen=False), [DECISIONS[1], DECISIONS[3]]),
        (Evidence(available=HEALTHY, v1beta1_only_consumers=["hpa"]), [DECISIONS[2], DECISIONS[3]]),
        (
            Evidence(available={"v1": "missing"}, lag_p95=120.0, v1beta1_only_consumers=["hpa"]),
            ["fix first: v1 unavailable (no APIService)", *DECISIONS[1:4]],
        ),
        (
            Evidence(available={"v1": FROZEN, "v1beta1": FROZEN}),
            [f"{V1_FIX}; v1beta1 unavailable (FailedDiscoveryCheck)", DECISIONS[3]],
        ),
        (
            Evidence(available={"v1": "True/Passed", "v1beta1": FROZEN}),
            [f"fix first: v1beta1 unavailable ({FROZEN[6:]})", DECISIONS[3]],
        ),
        (Evidence(available={"v1": "True/Passed", "v1beta1": "missing"}), [DECISIONS[3]]),
    ],
    ids=[
        "all-good",
        "v1-missing",
        "v1-unavailable",
        "lag-over-slo",
        "no-new-sample",
        "v1beta1-consumers",
        "all-bad",
        "both-unavailable",
        "registered-v1beta1-unavailable",
        "v1beta1-not-registered",
    ],
)
def test_verdict_follows_the_decision_table(evidence: Evidence, expected: list[str]) -> None:
    """Without a watch (--dra-metrics-watch) nothing shows 24 h of stable availability: widening is always held."""
    assert verdict(evidence) == expected


@pytest.mark.parametrize("server", ["v1.37.2", "v1.36.0", "v1.37.0-rc.1"])
def test_on_a_control_plane_up_to_1_37_keep_serving_v1beta1_even_with_no_consumer_seen(server: str) -> None:
    evidence = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version=server)
    assert verdict(evidence) == [DECISIONS[2], DECISIONS[3]]
    rule = evidence.hpa_needs_v1beta1()
    assert rule is not None and "HPA controller" in rule and server in rule


def test_a_newer_control_plane_leaves_the_decision_to_the_consumers_seen() -> None:
    evidence = Evidence(available=HEALTHY, lag_p95=10.0, new_sample_seen=True, server_version="v1.38.0")
    assert evidence.hpa_needs_v1beta1() is None and verdict(evidence) == [DECISIONS[3]]
    assert "safe to move consumers to v1" not in verdict(evidence)  # not before 24 h of stable availability


def _node_sample(cpu: str, memory: str) -> metrics_sampling.Sample:
    item = {"metadata": {"name": "n"}, "timestamp": "2026-01-01T00:00:00Z", "usage": {"cpu": cpu, "memory": memory}}
    return metrics_sampling.parse_sample("node", item)


@pytest.mark.parametrize(
    ("cpu", "millicores"), [("250m", 250), ("2", 2000), ("1500000n", 1.5), ("1500u", 1.5), ("1k", 1e6)]
)
def test_cpu_quantities_parse_into_millicores(cpu: str, millicores: float) -> None:
    sample = _node_sample(cpu, "0")
    assert sample.cpu_millicores == millicores, sample


@pytest.mark.parametrize(
    ("memory", "in_bytes"),
    [("64Mi", 64 * 2**20), ("1G", 1e9), ("3Ti", 3 * 2**40), ("2Pi", 2 * 2**50), ("1Ei", 2**60), ("1E", 1e18)],
)
def test_memory_quantities_parse_into_bytes_up_to_pi_and_ei(memory: str, in_bytes: float) -> None:
    sample = _node_sample("0", memory)
    assert sample.memory_bytes == in_bytes, sample


def test_a_pods_containers_add_up() -> None:
    item = {
        "metadata": {"name": "p", "namespace": "ns"},
        "timestamp": "2026-01-01T00:00:00Z",
        "containers": [{"usage": {"cpu": "100m", "memory": "1Pi"}}, {"usage": {"cpu": "0.5", "memory": "1Ki"}}],
    }
    sample = metrics_sampling.parse_sample("pod", item)
    assert (sample.cpu_millicores, sample.memory_bytes) == (600, 2**50 + 2**10), sample


def test_inventory_counts_resource_reads_by_consumer_and_skips_the_suite(tmp_path: Path) -> None:
    def event(agent: str, version: str, resource: str | None = "nodes", code: int = 200) -> str:
        reference = {"apiGroup": "metrics.k8s.io", "apiVersion": version} | ({"resource": resource} if resource else {})
        return json.dumps(
            {"user": {"username": "u"}, "userAgent": agent, "objectRef": reference, "responseStatus": {"code": code}}
        )

    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            [
                event("kubectl/v1.37.2 (linux/amd64)", "v1"),
                event("kube-controller-manager/v1.37.2 (linux/amd64)/horizontal-pod-autoscaler", "v1beta1"),
                event(f"{metrics_reads.SUITE_USER_AGENT} python", "v1beta1"),
                event("kubectl/v1.37.2", "v1beta1", resource=None),  # discovery, not a metrics read
                event("curl/8", "v1beta1", code=403),  # denied, not consumption
            ]
        )
        + "\n"
    )
    inventory = metrics_evidence.consumer_inventory(log)
    assert inventory == {"u (kube-controller-manager)": ["v1beta1"], "u (kubectl)": ["v1"]}, inventory
    assert metrics_evidence.v1beta1_only(inventory) == ["u (kube-controller-manager)"]


def test_the_fix_first_decision_is_what_the_implementation_fix_obligation_reads() -> None:
    assert metrics_decisions.asks_fix([V1_FIX, DECISIONS[3]]) and metrics_decisions.asks_fix([DECISIONS[0]])
    assert not metrics_decisions.asks_fix([DECISIONS[1], DECISIONS[3]])


# --- the unavailable state: one availability read, the verdict, blocked checks ----------------------------------

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


def _state(version: str, condition: str, *, served: bool = True, unavailable_for: float = 600.0) -> VersionAvailability:
    message = FROZEN_MESSAGE if condition == FROZEN else ""
    since = NOW - datetime.timedelta(seconds=unavailable_for)
    return VersionAvailability(version, served, condition, message, since)


def _frozen(unavailable_for: float = 600.0) -> Availability:
    return Availability(
        ("v1", "v1beta1"), {v: _state(v, FROZEN, unavailable_for=unavailable_for) for v in metrics_reads.VERSIONS}
    )


class _Clock:
    """A monotonic clock that moves only when the read sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _fake_cluster(monkeypatch: pytest.MonkeyPatch, states: list[dict[str, VersionAvailability]]) -> list[int]:
    """Discovery lists both versions; each read of the APIServices returns the next of `states` (then the last)."""
    reads = [0]

    def state(_api: Any, version: str, *, served: bool = False) -> VersionAvailability:
        return states[min(reads[0] - 1, len(states) - 1)][version]

    def served_versions(_api: Any) -> list[str]:
        reads[0] += 1
        return ["v1", "v1beta1"]

    monkeypatch.setattr(version_availability, "served_versions", served_versions)
    monkeypatch.setattr(version_availability, "apiservice_state", state)
    monkeypatch.setattr(version_availability, "utc_now", lambda: NOW)
    return reads


def test_a_version_unavailable_longer_than_the_deadline_is_read_once_without_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = _fake_cluster(monkeypatch, [_frozen(unavailable_for=600.0).versions])
    clock = _Clock()
    availability = version_availability.read_availability(None, 60.0, clock=clock, sleep=clock.sleep)
    assert reads == [1] and clock.slept == [] and availability.waited == 0.0, (reads, clock.slept)
    assert [s.version for s in availability.unavailable()] == ["v1", "v1beta1"] and availability.usable() == []


def test_a_version_that_just_turned_unavailable_gets_the_deadline_once_then_is_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = _fake_cluster(monkeypatch, [_frozen(unavailable_for=5.0).versions])
    clock = _Clock()
    availability = version_availability.read_availability(None, 60.0, clock=clock, sleep=clock.sleep)
    assert clock.now == 60.0 and availability.waited == 60.0 and reads[0] == 61, (clock.now, reads)
    assert availability.conditions() == {"v1": FROZEN, "v1beta1": FROZEN}


def test_a_pipeline_warming_up_is_waited_for_until_available(monkeypatch: pytest.MonkeyPatch) -> None:
    healthy = {v: _state(v, "True/Passed") for v in metrics_reads.VERSIONS}
    _fake_cluster(monkeypatch, [_frozen(unavailable_for=1.0).versions] * 3 + [healthy])
    clock = _Clock()
    availability = version_availability.read_availability(None, 60.0, clock=clock, sleep=clock.sleep)
    assert availability.unavailable() == [] and availability.usable() == ["v1", "v1beta1"] and clock.now == 3.0


def test_unavailable_versions_make_the_verdict_fix_first_in_the_run_section_and_the_markdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_read(*_args: Any) -> Any:
        raise AssertionError("nothing is read from an unavailable version")

    monkeypatch.setattr(metrics_evidence, "samples", no_read)
    evidence = metrics_evidence.point_in_time_evidence(None, _frozen(), 60.0, SCOPE)
    evidence.server_version = "v1.37.2"
    decisions = verdict(evidence)
    assert decisions[0] == f"{V1_FIX}; v1beta1 unavailable (FailedDiscoveryCheck)", decisions
    assert evidence.lag_p95 is None, "no sample read is an unknown lag, never zero"
    record = verdict_record(evidence, decisions)
    section = summarize_verdict([json.loads(json.dumps(record))])
    assert section is not None and section.artifact == "metrics-verdict.json"
    text = "\n".join(section.lines)
    assert text.startswith(f"- {V1_FIX}"), text
    assert f"v1 unavailable: {FROZEN_MESSAGE}" in text, text
    markdown = render_markdown(json.loads(json.dumps(record)))
    assert f"- **{V1_FIX}; v1beta1 unavailable (FailedDiscoveryCheck)**" in markdown, markdown
    assert f"- v1 is unavailable: {FROZEN_MESSAGE}" in markdown, markdown


def test_checks_needing_samples_of_an_unavailable_version_are_blocked_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_wait(*_args: Any) -> None:
        raise AssertionError("an unavailable version is not waited for")

    monkeypatch.setattr(sample_gate, "wait_first_node_samples", no_wait)
    gate = sample_gate.SampleGate(None, _frozen(), SCOPE, 90.0)
    reason = gate.blocked(["v1"])
    assert reason is not None and reason.startswith("metrics.k8s.io/v1 unavailable (FailedDiscoveryCheck: failing")
    assert "the availability check" in reason and "carries the finding" in reason, reason


def test_a_version_that_never_served_samples_is_waited_for_once(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[str] = []

    def never(_api: Any, version: str, _scope: Any, timeout: float) -> None:
        waited.append(version)
        raise WaitTimeout(f"first NodeMetrics from metrics.k8s.io/{version}", timeout, last_error=None)

    monkeypatch.setattr(sample_gate, "wait_first_node_samples", never)
    healthy = Availability(("v1", "v1beta1"), {v: _state(v, "True/Passed") for v in metrics_reads.VERSIONS})
    gate = sample_gate.SampleGate(None, healthy, SCOPE, 90.0)
    first, second = gate.blocked(["v1"]), gate.blocked(["v1", "v1beta1"])
    assert first is not None and first == second and "served no NodeMetrics" in first, first
    assert waited == ["v1"], waited


def test_old_samples_that_exist_still_break_the_slo_and_hold_autoscaling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stale is not unavailable: the samples are read, their age is the lag, and the hold follows."""
    old = NOW - datetime.timedelta(seconds=300)
    found = {
        "node/n": metrics_sampling.Sample("node", "n", old, "15s", 10.0, 1e6),
        "pod/ns/p": metrics_sampling.Sample("pod", "ns/p", old, "15s", 1.0, 1e5),
    }
    monkeypatch.setattr(metrics_evidence, "samples", lambda _api, version, _scope: found if version == "v1" else {})
    monkeypatch.setattr(metrics_evidence, "utc_now", lambda: NOW)
    healthy = Availability(("v1", "v1beta1"), {v: _state(v, "True/Passed") for v in metrics_reads.VERSIONS})
    evidence = metrics_evidence.point_in_time_evidence(None, healthy, 60.0, SCOPE)
    assert evidence.lag_p95 == 300.0, evidence.to_json()
    assert verdict(evidence) == [DECISIONS[1], DECISIONS[3]]


def test_sample_scope_takes_real_kubelets_first_and_does_not_grow_with_the_cluster() -> None:
    nodes = [f"kwok-node-{i}" for i in range(1000)]
    scope = metrics_sampling.SampleScope.of_cluster(["real-node-0"], [*nodes, "real-node-0"])
    assert scope.nodes == ("real-node-0", "kwok-node-0", "kwok-node-1", "kwok-node-10"), scope
    assert len(metrics_sampling.SampleScope.of_cluster([], nodes).nodes) == metrics_sampling.SCOPE_NODES
