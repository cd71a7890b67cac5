"""The canary gate's rules: figures, thresholds, pass/hold, and "no data" that never passes."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kubernetes.client import ApiClient

from dra_conformance.canary.audit import SCHEDULER, audit_facts, gather_audit
from dra_conformance.canary.events import AllocationTimeoutWatch
from dra_conformance.canary.inputs import AuditFacts, EventFacts, Inputs, provocations
from dra_conformance.canary.rules import DRA_REHEARSAL, REHEARSAL_RULE, GateVerdict, Policy, RuleResult, evaluate
from dra_conformance.canary.text import markdown_lines
from dra_conformance.kubelet.dra_metrics import PREPARE, CallHistogram, KubeletDraCalls, KubeletRun
from dra_conformance.report.certification import render_markdown, summarize, terminal_lines
from dra_conformance.verdict import RunFacts

DRIVER = "system:serviceaccount:fake-dra:fake-dra"
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
RUN_START, RUN_END = T0, T0 + timedelta(minutes=10)
CANARY_NS = "dra-rollback-abc123"


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _audit(
    verb: str, resource: str, namespace: str, name: str, seconds: float, *, user: str, code: int, sub: str = ""
) -> dict[str, Any]:
    ref = {"resource": resource, "namespace": namespace, "name": name, **({"subresource": sub} if sub else {})}
    return {
        "stage": "ResponseComplete",
        "verb": verb,
        "objectRef": ref,
        "user": {"username": user},
        "responseStatus": {"code": code},
        "stageTimestamp": _at(seconds),
    }


def _pod(namespace: str, name: str, created: float, bound: float | None) -> list[dict[str, Any]]:
    events = [_audit("create", "pods", namespace, name, created, user="admin", code=201)]
    if bound is not None:
        events.append(_audit("create", "pods", namespace, name, bound, user=SCHEDULER, code=201, sub="binding"))
    return events


def _status_write(namespace: str, claim: str, seconds: float, *, user: str, code: int) -> dict[str, Any]:
    return _audit("patch", "resourceclaims", namespace, claim, seconds, user=user, code=code, sub="status")


def _rollback(dra_ready: float | None = 0.2, plugin_ready: float | None = 0.1, **changes: Any) -> dict[str, Any]:
    def path(p95: float | None, failures: int = 0) -> dict[str, Any]:
        return {"node": "n", "samples": 8, "ready_p50_seconds": p95, "ready_p95_seconds": p95, "failures": failures}

    report: dict[str, Any] = {
        "canary_baseline": {"dra": path(dra_ready), "device-plugin": path(plugin_ready)},
        "verdict": "rolled back cleanly",
        "failed_phase": None,
        "phases": [
            {"phase": "before", "outcome": "passed", "started": "2026-11-30T12:00:01+00:00"},
            {"phase": "after_change", "outcome": "passed", "started": "2026-11-30T12:00:02+00:00"},
            {"phase": "after_rollback", "outcome": "passed", "started": "2026-11-30T12:00:05+00:00"},
        ],
    }
    report.update(changes)
    return report


def _audit_facts(dra: list[float], plugin: list[float], **changes: Any) -> AuditFacts:
    facts = AuditFacts(
        canary_allocation={"dra": dra, "device-plugin": plugin},
        canary_bound={"dra": len(dra), "device-plugin": len(plugin)},
        status_writes=12,
    )
    for key, value in changes.items():
        setattr(facts, key, value)
    return facts


# A real node's kubelet that prepared 8 claims of the driver, each within 0.1 s, all OK.
KUBELET_DRIVER = "gpu.example.com"
FAST_PREPARES = KubeletDraCalls(
    {(KUBELET_DRIVER, PREPARE): CallHistogram({0.1: 8.0, math.inf: 8.0}, {"OK": 8.0})}, {KUBELET_DRIVER: 1.0}
)


def _inputs(**changes: Any) -> Inputs:
    found = Inputs(
        DRIVER,
        rollback=_rollback(),
        audit=_audit_facts([0.05] * 8, [0.04] * 8),
        events=EventFacts([]),
        driver=KUBELET_DRIVER,
        kubelet=KubeletRun(("node-a",), FAST_PREPARES),
    )
    for key, value in changes.items():
        setattr(found, key, value)
    return found


def _rule(gate: dict[str, Any], name: str) -> dict[str, Any]:
    return next(rule for rule in gate["rules"] if rule["rule"] == name)


# --- figures from the audit log -----------------------------------------------------------------------------------


def test_audit_facts_time_canary_pods_per_path_and_the_runs_dra_pods_only() -> None:
    events = [
        *_pod(CANARY_NS, "baseline-dra-0", 1.0, 1.25),
        *_pod(CANARY_NS, "baseline-dra-1", 2.0, None),  # never bound
        *_pod(CANARY_NS, "baseline-device-plugin-0", 3.0, 3.1),
        *_pod("test-ns", "with-claim", 4.0, 4.5),
        _audit("update", "resourceclaims", "test-ns", "c", 4.3, user=SCHEDULER, code=200, sub="status"),
        *_pod("other-ns", "no-claim", 5.0, 5.2),
        *_pod("test-ns", "before-the-run", -60.0, -59.0),
    ]
    facts = audit_facts(
        reversed(events), driver_user=DRIVER, canary_namespace=CANARY_NS, since=RUN_START, until=RUN_END
    )
    assert facts.canary_allocation == {"dra": [0.25], "device-plugin": [0.1]}, facts
    assert facts.canary_bound == {"dra": 1, "device-plugin": 1}, facts
    assert facts.run_dra_allocation == [0.5], f"only the pod whose claim the scheduler allocated: {facts}"


def test_only_the_driver_under_tests_own_status_writes_in_the_run_are_counted() -> None:
    events = [
        _status_write("ns", "ok", 1, user=DRIVER, code=200),
        _status_write("ns", "denied", 2, user=DRIVER, code=403),
        _status_write("ns", "invalid", 3, user=DRIVER, code=422),
        _status_write("ns", "conflict", 4, user=DRIVER, code=409),
        _status_write("ns", "gone", 5, user=DRIVER, code=404),
        # A check's own identity provoking a denial on purpose (the RBAC matrix): not the driver under test.
        _status_write("rbac-ns", "probe", 6, user="system:serviceaccount:rbac-ns:driver", code=403),
        # The driver before this run (a reused cluster): outside the window.
        _status_write("ns", "earlier", -30, user=DRIVER, code=403),
    ]
    facts = audit_facts(events, driver_user=DRIVER, canary_namespace=None, since=RUN_START, until=RUN_END)
    assert facts.status_writes == 5, facts
    assert facts.denials == ["ns/denied patch -> 403"], facts
    assert facts.errors == ["ns/invalid patch -> 422"], f"409 and 404 are the protocol, not errors: {facts}"


def test_the_audit_reader_skips_lines_cut_short_and_says_why_a_log_is_missing(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    whole = json.dumps(_status_write("ns", "denied", 2, user=DRIVER, code=403), separators=(",", ":"))  # as kube writes
    log.write_text(whole + "\n" + whole[:40] + "\n")
    facts, why = gather_audit(log, driver_user=DRIVER, canary_namespace=None, since=RUN_START, until=RUN_END)
    assert facts is not None and facts.denials == ["ns/denied patch -> 403"], (facts, why)
    missing, why = gather_audit(
        tmp_path / "nope.log", driver_user=DRIVER, canary_namespace=None, since=RUN_START, until=RUN_END
    )
    assert missing is None and "does not exist" in why, why
    unreadable, why = gather_audit(None, driver_user=DRIVER, canary_namespace=None, since=RUN_START, until=RUN_END)
    assert unreadable is None and "--dra-audit-log" in why, why


# --- rule 1: latency against the baseline or the SLO -------------------------------------------------------------


def test_the_tolerance_is_the_larger_of_the_relative_and_the_absolute_part() -> None:
    policy = Policy()
    assert policy.limit(0.1) == 0.35, "fake nodes: 0.25 s dominates"
    assert policy.limit(4.0) == 5.0, "real nodes: 25 % dominates"


def test_dra_latency_within_tolerance_passes_and_beyond_it_holds() -> None:
    gate = evaluate(_inputs(), Policy())
    assert gate["state"] == "pass", gate
    allocation = _rule(gate, "allocation p95")
    assert allocation["figure"] == "DRA p95 0.05 s (8 canary pods)", allocation
    assert allocation["threshold"].startswith("<= 0.29 s (device-plugin p95 0.04 s"), allocation
    slow = evaluate(_inputs(rollback=_rollback(dra_ready=0.5, plugin_ready=0.1)), Policy())
    ready = _rule(slow, "pod-ready p95")
    assert (ready["result"], slow["state"]) == ("hold", "hold"), slow
    assert "pod-ready p95" in slow["reasons"][0], slow["reasons"]


def test_without_a_rehearsal_allocation_falls_back_to_the_slo_and_pod_ready_has_no_data() -> None:
    audit = AuditFacts(run_dra_allocation=[0.2, 0.3, 1.4], status_writes=3)
    gate = evaluate(_inputs(rollback=None, audit=audit), Policy(allocation_slo=2.0))
    allocation = _rule(gate, "allocation p95")
    assert allocation["result"] == "pass" and allocation["threshold"].startswith("<= 2.0 s (configured SLO"), gate
    assert "3 pods of this run" in allocation["figure"], allocation
    assert _rule(gate, "pod-ready p95")["result"] == "no data", gate
    assert _rule(gate, REHEARSAL_RULE)["result"] == "hold", "no rehearsal is a hold, not a pass"
    assert gate["state"] == "hold", gate


def test_a_rule_without_data_still_names_its_threshold_and_says_once_what_is_missing() -> None:
    gate = evaluate(
        _inputs(rollback=None, audit=None, audit_missing="no audit log"), Policy(allocation_slo=2.0, ready_slo=5.0)
    )
    allocation, ready = _rule(gate, "allocation p95"), _rule(gate, "pod-ready p95")
    assert allocation["result"] == "no data" and allocation["threshold"].startswith("<= 2.0 s (configured SLO)"), gate
    assert "no audit log" in allocation["why"], allocation
    assert (ready["result"], ready["threshold"]) == ("no data", "<= 5.0 s (configured SLO)"), ready


def test_a_baseline_path_without_samples_falls_back_to_the_slo_and_says_so() -> None:
    gate = evaluate(_inputs(rollback=_rollback(plugin_ready=None)), Policy(ready_slo=5.0))
    ready = _rule(gate, "pod-ready p95")
    assert ready["result"] == "pass", ready
    assert ready["threshold"] == "<= 5.0 s (configured SLO: no device-plugin canary pod got Ready)", ready
    assert ready["why"] == "no device-plugin canary pod got Ready", ready


def test_paths_measured_on_different_kinds_of_kubelet_are_held_to_the_slo_not_compared() -> None:
    report = _rollback(dra_ready=0.3, plugin_ready=1.8)
    report["canary_baseline"]["device-plugin"]["kubelet"] = "real"
    report["canary_baseline"]["dra"]["kubelet"] = "fake (kwok)"
    gate = evaluate(_inputs(rollback=report), Policy(ready_slo=5.0, allocation_slo=1.0))
    for name in ("pod-ready p95", "allocation p95"):
        rule = _rule(gate, name)
        assert "configured SLO: device-plugin baseline on a real kubelet" in rule["threshold"], rule
        assert "not comparable" in rule["why"], rule
    report["canary_baseline"]["dra"]["kubelet"] = "real"
    same = _rule(evaluate(_inputs(rollback=report), Policy()), "pod-ready p95")
    assert same["threshold"].startswith("<= 2.25 s (device-plugin p95 1.8 s"), same


# --- rule 2: errors against the budget ---------------------------------------------------------------------------


def test_one_denial_holds_a_zero_budget_and_passes_a_budget_of_one() -> None:
    audit = _audit_facts([0.05] * 8, [0.04] * 8, denials=["ns/c patch -> 403"])
    held = _rule(evaluate(_inputs(audit=audit), Policy()), "errors against budget")
    assert held["result"] == "hold" and "status-writer denials 1" in held["figure"], held
    assert "ns/c patch -> 403" in held["figure"], "the report names what it counted"
    allowed = _rule(evaluate(_inputs(audit=audit), Policy(error_budget=1)), "errors against budget")
    assert allowed["result"] == "pass", allowed


def test_allocation_timeouts_count_against_the_budget() -> None:
    events = EventFacts(["ns/p", "ns/p"])
    rule = _rule(evaluate(_inputs(events=events), Policy(error_budget=1)), "errors against budget")
    assert rule["result"] == "hold" and "allocation timeouts 2" in rule["figure"], rule


def test_missing_counts_are_no_data_unless_what_was_counted_is_already_over_budget() -> None:
    gate = evaluate(_inputs(events=None, events_missing="event watch failed: 500"), Policy())
    rule = _rule(gate, "errors against budget")
    assert rule["result"] == "no data" and "event watch failed" in rule["why"], rule
    assert gate["state"] == "incomplete", f"no data never passes: {gate}"
    over = _audit_facts([0.05] * 8, [0.04] * 8, errors=["ns/c patch -> 500"])
    gate = evaluate(_inputs(audit=over, events=None, events_missing="watch failed"), Policy())
    assert _rule(gate, "errors against budget")["result"] == "hold", gate


# --- rule 3: job-start failures after allocation ------------------------------------------------------------------


def test_dra_pods_bound_but_never_ready_beyond_the_baseline_hold() -> None:
    report = _rollback()
    report["canary_baseline"]["dra"]["failures"] = 2
    audit = _audit_facts([0.05] * 8, [0.04] * 8, canary_bound={"dra": 7, "device-plugin": 8})
    rule = _rule(evaluate(_inputs(rollback=report, audit=audit), Policy()), "job-start failures after allocation")
    assert rule["result"] == "hold" and rule["figure"] == "DRA 1 of 7 bound never Ready", rule
    without_audit = evaluate(_inputs(rollback=report, audit=None, audit_missing="no log"), Policy())
    rule = _rule(without_audit, "job-start failures after allocation")
    assert "2 of 8 never Ready (bound or not" in rule["figure"], f"without the audit log every miss counts: {rule}"


# --- rule 4: device-plugin rollback rehearsed ---------------------------------------------------------------------


def test_a_clean_rehearsal_passes_with_its_dates() -> None:
    rule = _rule(evaluate(_inputs(), Policy()), REHEARSAL_RULE)
    assert rule["result"] == "pass", rule
    assert rule["figure"] == "yes, 2026-11-30T12:00:01+00:00 to 2026-11-30T12:00:05+00:00: rolled back cleanly"


def test_a_rehearsal_not_finished_or_not_clean_holds() -> None:
    partial = _rollback()
    partial["phases"][2] = {"phase": "after_rollback", "outcome": "not run"}
    rule = _rule(evaluate(_inputs(rollback=partial), Policy()), REHEARSAL_RULE)
    assert rule["result"] == "hold" and rule["figure"] == "no (phases recorded: before, after_change)", rule
    failed = _rollback(verdict="not rolled back cleanly", failed_phase="after_rollback")
    rule = _rule(evaluate(_inputs(rollback=failed), Policy()), REHEARSAL_RULE)
    assert rule["result"] == "hold" and "first failed phase after_rollback" in rule["figure"], rule


def test_with_several_rehearsals_the_dra_rehearsals_own_verdict_decides() -> None:
    own = {"verdict": "rolled back cleanly", "failed_phase": None}
    other = {"verdict": "not rolled back cleanly", "failed_phase": "after_change"}
    report = _rollback(
        verdict="not rolled back cleanly",
        failed_phase="metrics: after_change",
        rehearsals={DRA_REHEARSAL: own, "metrics": other},
    )
    rule = _rule(evaluate(_inputs(rollback=report), Policy()), REHEARSAL_RULE)
    assert rule["result"] == "pass", rule


# --- the gate in the certification summary ------------------------------------------------------------------------


def test_the_summary_carries_the_gate_in_json_markdown_and_the_short_form(tmp_path: Path) -> None:
    gate = evaluate(_inputs(rollback=None), Policy())
    facts = RunFacts("0.1.0", "local", "v1.37.2", "gpu.example.com", "p.yaml", "abc", "2.0.0", ())
    summary = summarize([], facts, tmp_path, gate)
    assert summary["canary_gate"]["state"] == GateVerdict.HOLD, summary["canary_gate"]
    markdown = render_markdown(summary)
    assert "## Canary gate: hold" in markdown, markdown
    assert "| device-plugin rollback rehearsed | no (no device-plugin rollback rehearsal" in markdown, markdown
    printed = "\n".join(terminal_lines(summary))
    assert "canary gate: hold" in printed and "pod-ready p95: no data" in printed, printed
    assert "device-plugin rollback rehearsed: hold: no (no device-plugin rollback rehearsal" in printed, printed
    assert {rule["result"] for rule in gate["rules"]} <= {str(r) for r in RuleResult}, gate


def _event(reason: str, message: str, uid: str, count: int | None = None, series: int | None = None) -> Any:
    return SimpleNamespace(
        reason=reason,
        message=message,
        count=count,
        series=SimpleNamespace(count=series) if series is not None else None,
        metadata=SimpleNamespace(namespace="ns", uid=uid),
        involved_object=SimpleNamespace(name="pod"),
    )


def test_the_event_watch_counts_each_occurrence_of_an_allocation_timeout_once() -> None:
    watch = AllocationTimeoutWatch(ApiClient())
    timeout = "0/2 nodes are available: 2 timed out trying to allocate devices."
    watch._see(_event("FailedScheduling", timeout, "a"))
    watch._see(_event("FailedScheduling", timeout, "a", series=3))  # the same Event, seen again as a series
    watch._see(_event("FailedScheduling", "0/2 nodes are available: 2 cannot allocate all claims.", "b"))
    watch._see(_event("FailedPrepareDynamicResources", timeout, "c"))
    facts, why = watch.stop()
    assert facts is not None and facts.allocation_timeouts == ["ns/pod"] * 3, (facts, why)
    watch._see(_event("FailedScheduling", timeout, "d"))
    assert watch.stop()[0] == facts, "nothing is counted after the run's end"


def test_a_broken_event_watch_gives_no_data_not_zero() -> None:
    watch = AllocationTimeoutWatch(ApiClient())
    watch._fail("event watch failed: 500 Internal Server Error")
    facts, why = watch.stop()
    assert facts is None and why == "event watch failed: 500 Internal Server Error", (facts, why)


def test_errors_a_check_declared_it_provokes_are_excluded_and_listed_not_counted() -> None:
    provoked = provocations(
        [
            {
                "check": "suites/protocol/test_protocol.py::test_other_node",
                "what": "a status write for a claim of another node",
                "namespace": "ns-provoking",
                "since": (T0 + timedelta(seconds=10)).isoformat(),
                "until": (T0 + timedelta(seconds=20)).isoformat(),
            }
        ]
    )
    events = [
        _status_write("ns-provoking", "foreign", 15, user=DRIVER, code=422),
        _status_write("ns-provoking", "after-window", 25, user=DRIVER, code=422),
        _status_write("ns-other", "same-time", 15, user=DRIVER, code=403),
    ]
    facts = audit_facts(
        events, driver_user=DRIVER, canary_namespace=None, since=RUN_START, until=RUN_END, provoked=provoked
    )
    assert facts.excluded == [
        "ns-provoking/foreign patch -> 422 (provoked by suites/protocol/test_protocol.py::test_other_node: "
        "a status write for a claim of another node)"
    ], facts
    assert facts.errors == ["ns-provoking/after-window patch -> 422"], "outside its window it counts"
    assert facts.denials == ["ns-other/same-time patch -> 403"], "another namespace counts"
    only_provoked = audit_facts(
        events[:1], driver_user=DRIVER, canary_namespace=None, since=RUN_START, until=RUN_END, provoked=provoked
    )
    gate = evaluate(_inputs(audit=_audit_facts([0.05] * 8, [0.04] * 8, excluded=only_provoked.excluded)), Policy())
    assert gate["state"] == "pass", gate["reasons"]
    assert gate["excluded"] == only_provoked.excluded
    assert "excluded as provoked by checks 1" in _rule(gate, "errors against budget")["figure"]
    assert any("provoked on purpose" in line for line in markdown_lines(gate))
