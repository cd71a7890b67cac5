"""Fault attribution without a race: a check that met a fault's detection window counts as the fault's.

The cluster health watch records a fault a probe after it began, so the report of a check the fault broke can reach
the controller before the fault does; attribution is decided at the end, over the window from a lead before the
fault's detected start to a margin after its end.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dra_conformance.kube.cluster_health import FAULT_MARGIN, Fault
from dra_conformance.plugin.certification_hooks import (
    BASIS_PROPERTY,
    CAPABILITY_PROPERTY,
    OBLIGATION_CAPABILITY_PROPERTY,
    OBLIGATION_PROPERTY,
    OutcomeCollector,
)
from dra_conformance.report.certification import summarize
from dra_conformance.report.harness_errors import HARNESS_ERROR
from dra_conformance.report.summary_attribution import (
    DRIVER_EXIT_LEAD,
    FAULT_LEAD,
    attribute,
    cluster_windows,
    exit_windows,
)
from dra_conformance.verdict import CLUSTER_FAULT, DRIVER_STAYS_UP, CheckResult, Outcome, RunFacts

FACTS = RunFacts("0.1.0", "local", "v1.37.2", "gpu.example.com", "p.yaml", "abc", "2.0.0", ("bindingConditions",))
# The detected start of the fault in these tests (the last probe that found the API server healthy).
DETECTED = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
BINDING = "suites/binding/test_binding.py::test_binding_conditions"
SECOND = timedelta(seconds=1)


def _span(start: datetime, stop: datetime) -> list[tuple[float, float]]:
    return [(start.timestamp(), stop.timestamp())]


def _failed(nodeid: str = BINDING, obligation: str = "binding.conditions-reported") -> CheckResult:
    return CheckResult(nodeid, Outcome.FAILED, "connection refused", ("bindingConditions",), obligation, "")


def _api_server_killed() -> Fault:
    return Fault("kube-apiserver", DETECTED, "unreachable: Connection refused", DETECTED + 30 * SECOND)


def test_the_lead_before_a_faults_detected_start_is_named_and_covers_one_probe() -> None:
    assert FAULT_LEAD >= timedelta(seconds=3), f"FAULT_LEAD {FAULT_LEAD} is shorter than one poll plus one probe"
    assert DRIVER_EXIT_LEAD > timedelta(0), DRIVER_EXIT_LEAD


def test_a_check_that_failed_just_before_the_faults_detected_start_is_the_faults(tmp_path: Path) -> None:
    """As measured: the check's call failed on the killed API server before the health watch noticed."""
    failed_at = DETECTED - FAULT_LEAD + SECOND
    spans = {BINDING: _span(failed_at - 5 * SECOND, failed_at)}
    (result,) = attribute([_failed()], spans, cluster_windows([_api_server_killed()]))
    assert (result.outcome, result.obligation) == (Outcome.ERROR, CLUSTER_FAULT), result
    assert result.reason.startswith(f"{CLUSTER_FAULT}: kube-apiserver unhealthy from 12:00:00"), result.reason
    summary = summarize([result], FACTS, tmp_path, cluster_faults=[_api_server_killed().describe()])
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert summary["capabilities"]["bindingConditions"]["state"] != "failed", summary["capabilities"]


def test_a_failure_well_before_the_window_or_after_its_margin_stays_the_drivers() -> None:
    ended_before = DETECTED - FAULT_LEAD - SECOND
    began_after = DETECTED + 30 * SECOND + FAULT_MARGIN + SECOND
    for start, stop in ((ended_before - SECOND, ended_before), (began_after, began_after + SECOND)):
        (result,) = attribute([_failed()], {BINDING: _span(start, stop)}, cluster_windows([_api_server_killed()]))
        assert (result.outcome, result.obligation) == (Outcome.FAILED, "binding.conditions-reported"), (start, result)


def test_only_the_failing_phases_count_not_a_teardown_that_passed_during_the_fault() -> None:
    """The span held against the window is that of the phases that failed, recorded by the collector."""
    collector = OutcomeCollector(SimpleNamespace())  # type: ignore[arg-type]  # the hook reads no configuration
    call_failed = DETECTED - timedelta(minutes=2)
    collector.pytest_runtest_logreport(_report("call", call_failed, failed=True))
    collector.pytest_runtest_logreport(_report("teardown", DETECTED + SECOND))
    results = list(collector.results.values())
    assert [r.outcome for r in results] == [Outcome.FAILED], results
    (result,) = attribute(results, collector.failing_spans, cluster_windows([_api_server_killed()]))
    assert result.obligation == "binding.conditions-reported", (collector.failing_spans, result)


def test_a_report_that_arrives_before_the_fault_is_recorded_is_still_the_faults() -> None:
    """The race of the issue: no fault is known when the report arrives; the end decides with the fault recorded."""
    collector = OutcomeCollector(SimpleNamespace())  # type: ignore[arg-type]
    collector.pytest_runtest_logreport(_report("call", DETECTED + SECOND, failed=True))
    assert collector.faults == [] and collector.results[BINDING].outcome == Outcome.FAILED, collector.results
    collector.faults = [_api_server_killed()]  # what the health thread records a probe later
    (result,) = attribute(list(collector.results.values()), collector.failing_spans, cluster_windows(collector.faults))
    assert (result.outcome, result.obligation) == (Outcome.ERROR, CLUSTER_FAULT), result


def _exit(*, caused_by_suite: bool, at: datetime = DETECTED) -> dict[str, Any]:
    return {
        "node": "kwok-node-0",
        "code": -9,
        "at": at.timestamp(),
        "caused_by_suite": caused_by_suite,
        "describe": "kwok-node-0: killed by signal 9",
        "log_tail": "",
    }


def test_a_harness_error_within_an_unexpected_exits_window_fails_on_driver_stays_up() -> None:
    keyerror = CheckResult(BINDING, Outcome.ERROR, "KeyError: 'devices'", (), HARNESS_ERROR, traceback="tb")
    named = _failed("suites/status/test_s.py::t")
    spans = {r.nodeid: _span(DETECTED - DRIVER_EXIT_LEAD + SECOND, DETECTED) for r in (keyerror, named)}
    found = attribute([keyerror, named], spans, exits=exit_windows([_exit(caused_by_suite=False)]))
    assert (found[0].outcome, found[0].obligation) == (Outcome.FAILED, DRIVER_STAYS_UP), found[0]
    assert "[the driver exited unexpectedly: kwok-node-0: killed by signal 9]" in found[0].reason, found[0].reason
    assert found[1].obligation == "binding.conditions-reported" and "[the driver exited: " in found[1].reason, found[1]


@pytest.mark.parametrize("caused_by_suite", [True, False], ids=["suites-own-kill", "outside-the-window"])
def test_the_suites_own_kills_and_failures_outside_the_window_are_left_alone(caused_by_suite: bool) -> None:
    error = CheckResult(BINDING, Outcome.ERROR, "KeyError: 'devices'", (), HARNESS_ERROR)
    at = DETECTED if caused_by_suite else DETECTED + DRIVER_EXIT_LEAD + SECOND
    spans = {BINDING: _span(DETECTED - 10 * SECOND, DETECTED)}
    (result,) = attribute([error], spans, exits=exit_windows([_exit(caused_by_suite=caused_by_suite, at=at)]))
    assert result == error, result


def test_a_cluster_fault_comes_before_a_driver_exit_in_the_same_window() -> None:
    spans = {BINDING: _span(DETECTED, DETECTED + SECOND)}
    (result,) = attribute(
        [_failed()], spans, cluster_windows([_api_server_killed()]), exit_windows([_exit(caused_by_suite=False)])
    )
    assert result.obligation == CLUSTER_FAULT, result


def _report(when: str, stop: datetime, *, failed: bool = False) -> Any:
    """A phase report as the controller receives it (what `pytest_runtest_logreport` reads of it)."""
    properties = [(CAPABILITY_PROPERTY, "bindingConditions")]
    if failed:
        properties += [
            (OBLIGATION_PROPERTY, "binding.conditions-reported"),
            (BASIS_PROPERTY, "contract"),
            (OBLIGATION_CAPABILITY_PROPERTY, ""),
        ]
    return SimpleNamespace(
        nodeid=BINDING,
        when=when,
        passed=not failed,
        failed=failed,
        skipped=False,
        longrepr=None,
        longreprtext="E   ConnectionRefusedError" if failed else "",
        user_properties=properties,
        start=(stop - SECOND).timestamp(),
        stop=stop.timestamp(),
    )
