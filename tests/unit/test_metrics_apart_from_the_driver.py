"""Separate contracts, separate verdicts: the Metrics API's checks never decide the driver's certificate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_conformance.report.certification import METRICS_VERDICT, render_markdown, summarize, terminal_lines
from dra_conformance.report.harness_errors import HARNESS_ERROR
from dra_conformance.verdict import CheckResult, Outcome, RunFacts, Selection, about_metrics, capability_table, decide

FACTS = RunFacts("0.1.0", "local", "v1.37.2", "gpu.example.com", "p.yaml", "abc", "2.0.0", ("healthStream",))
DRIVER = CheckResult("suites/protocol/test_health.py::t", Outcome.PASSED, "", ("healthStream",))
# As measured: a metrics adapter frozen as the run started failed five metrics checks on 503s.
METRICS_FAILURES = [
    CheckResult(
        f"suites/metrics/test_metrics_api.py::test_{n}@metrics",
        Outcome.FAILED,
        "503",
        (),
        "metrics.served-version-serves-node-metrics",
    )
    for n in range(4)
] + [
    CheckResult(
        "suites/rollback/test_metrics_rollback.py::test_before_the_change_both_metrics_versions_serve_their_consumers",
        Outcome.FAILED,
        "v1 not Available",
        (),
        "rollback.metrics-versions-serve",
    )
]
FROZEN = "fix first: v1 unavailable since 18:43:23 UTC (read failed: 503)"
FROZEN_VERDICT = {"decisions": [FROZEN], "rule": None}


@pytest.mark.parametrize(
    ("nodeid", "metrics"),
    [
        ("suites/metrics/test_metrics_api.py::test_x[v1]@metrics", True),
        ("suites/rollback/test_metrics_rollback.py::test_before", True),
        ("../site-packages/dra_conformance_suites/suites/metrics/test_metrics_api.py::t", True),
        ("suites/rollback/test_device_plugin_rollback.py::test_before", False),
        ("suites/protocol/test_metrics_like_name.py::t", False),
        ("tests/metrics/test_adapter_faults.py::t", False),
    ],
)
def test_which_checks_are_the_metrics_apis(nodeid: str, metrics: bool) -> None:
    assert about_metrics(nodeid) is metrics, nodeid


def test_metrics_failures_leave_the_reference_driver_certified_and_feed_the_metrics_section(tmp_path: Path) -> None:
    (tmp_path / METRICS_VERDICT).write_text(json.dumps(FROZEN_VERDICT))
    summary = summarize([DRIVER, *METRICS_FAILURES], FACTS, tmp_path)
    assert summary["verdict"] == "certified", summary["reasons"]
    assert summary["totals"] == {"passed": 1}, f"the driver's totals hold the driver's checks: {summary['totals']}"
    assert "metrics" not in summary["suites"], summary["suites"]
    section = summary["metrics"]
    assert section["checks"] == {"failed": 5}, section
    assert section["verdict"] == FROZEN, section
    assert section["failed"][-1].startswith("suites/rollback/test_metrics_rollback.py::"), section["failed"]
    assert len(summary["tests"]) == 6, "every check's outcome is still listed"
    line = next((x for x in terminal_lines(summary) if "metrics API" in x), None)
    assert line is not None and "its own verdict, never the driver's" in line and "5 failed" in line, line
    markdown = render_markdown(summary)
    assert "- metrics API (its own verdict, never the driver's): fix first: v1 unavailable since" in markdown


def test_metrics_errors_and_harness_errors_do_not_make_the_driver_incomplete() -> None:
    blocked = CheckResult("suites/metrics/test_metrics_api.py::t", Outcome.ERROR, "blocked", (), "metrics.x")
    keyerror = CheckResult("suites/metrics/test_metrics_api.py::k", Outcome.ERROR, "KeyError", (), HARNESS_ERROR)
    results = [DRIVER, blocked, keyerror]
    verdict, reasons = decide(results, capability_table(results, FACTS))
    assert str(verdict) == "certified", reasons


def test_a_metrics_check_never_decides_a_driver_capability() -> None:
    marked = CheckResult("suites/metrics/test_m.py::t", Outcome.FAILED, "x", ("healthStream",), "metrics.x")
    table = capability_table([DRIVER, marked], FACTS)
    assert table["healthStream"]["state"] == "passed", table


def test_a_run_stopped_during_the_metrics_checks_is_still_incomplete() -> None:
    """Which checks never ran is counted over the whole selection: a run that stopped early certifies nothing."""
    never = "suites/metrics/test_metrics_api.py::never"
    selection = Selection(collected=(DRIVER.nodeid, never), stopped="interrupted")
    verdict, reasons = decide([DRIVER], capability_table([DRIVER], FACTS), selection=selection)
    assert str(verdict) == "incomplete" and "1 never ran" in reasons[0], reasons


def test_driver_failures_still_decide_beside_metrics_failures(tmp_path: Path) -> None:
    broken = CheckResult("suites/status/test_s.py::t", Outcome.FAILED, "x", (), "status.devices-reported")
    summary = summarize([DRIVER, broken, *METRICS_FAILURES], FACTS, tmp_path)
    assert summary["verdict"] == "not certified", summary["reasons"]
    assert summary["reasons"][0] == "1 check(s) failed: status.devices-reported (1 check)", summary["reasons"]
