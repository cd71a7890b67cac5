"""The run's outcome as Sonobuoy `manual` results, so that `sonobuoy results` shows our verdict.

JUnit alone loses it: a run of 102 passed, 80 not applicable and 0 failed checks is "incomplete" for us, and
"passed" for Sonobuoy's JUnit reading, which knows only passed, failed and skipped. So the results file holds one
leaf for the verdict, with a status of its own (`Verdict incomplete`), then one leaf per check under its suite,
with the check's outcome as its status: Sonobuoy's own words where they mean the same (passed, failed, skipped)
and ours where they do not (`not applicable`: skipped with a reason that is no fault; `error`: the check could not
judge the driver). `sonobuoy results` prints the counts of each status, the verdict's among them, and lists the
failed checks; `--mode detailed` prints each leaf with its reason (read from the run's JUnit, already masked).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dra_conformance.report.certification import SUMMARY_JSON, SUMMARY_MARKDOWN
from dra_conformance.sonobuoy import protocol

PLUGIN_ITEM = "dra-conformance"
JUNIT_XML = "junit.xml"
# Our outcomes (verdict.Outcome) as leaf statuses: Sonobuoy's where the meaning is the same.
STATUS_OF_OUTCOME = {
    "passed": protocol.PASSED,
    "failed": protocol.FAILED,
    "skipped": protocol.SKIPPED,
    "not applicable": "not applicable",
    "error": "error",
}
# A reason is cut here in the results tree; the whole text stays in junit.xml and the Allure results.
REASON_LIMIT = 600


def verdict_status(verdict: str) -> str:
    """The verdict leaf's status: 'Verdict certified with advisories'; never one of Sonobuoy's own statuses.

    Capitalized so that it sorts before every lower-case status: Sonobuoy joins a plugin's statuses in sorted order
    ('Verdict incomplete: 1, error: 12, passed: 92', processing.go AggregateStatus), and `sonobuoy status` shows the
    first of them as the plugin's RESULT (status.go printSummary splits on ':'), which is then our verdict.
    """
    status = f"Verdict {verdict}"
    for separator in protocol.CUSTOM_STATUS_SEPARATORS:
        status = status.replace(separator, " ")
    return status


def junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) pytest's JUnit writer gives test `nodeid` (suites/a/test_b.py::C::t: suites.a.test_b.C, t)."""
    parts = nodeid.split("::")
    parts[0] = re.sub(r"\.py$", "", parts[0].replace("/", "."))
    return ".".join(parts[:-1]), parts[-1]


def junit_reasons(junit: Path) -> dict[tuple[str, str], str]:
    """The message of every failed, errored or skipped test case of a JUnit file, by (classname, name)."""
    if not junit.is_file():
        return {}
    try:
        root = ElementTree.parse(junit).getroot()
    except ElementTree.ParseError:
        return {}
    reasons = {}
    for case in root.iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                lines = (child.text or "").strip().splitlines()
                message = child.get("message") or (lines[0] if lines else "")
                reasons[(case.get("classname", ""), case.get("name", ""))] = message
                break
    return reasons


def _suite(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if parts[0] == "suites" and len(parts) > 1 else parts[0]


def _cut(text: str) -> str:
    return text if len(text) <= REASON_LIMIT else text[:REASON_LIMIT] + " ..."


def from_summary(summary: Mapping[str, Any], reasons: Mapping[tuple[str, str], str]) -> dict[str, Any]:
    """The results tree of a run that wrote its summary: the verdict leaf, then each suite's checks."""
    run = summary.get("run") or {}
    verdict = str(summary["verdict"])
    verdict_leaf = {
        "name": f"verdict: {verdict} ({run.get('driver', '?')}, profile {run.get('profile', '?')})",
        "status": verdict_status(verdict),
        "details": {
            "reasons": list(summary.get("reasons") or []),
            "totals": dict(summary.get("totals") or {}),
            "summary": f"{SUMMARY_MARKDOWN}, {SUMMARY_JSON}",
        },
    }
    suites: dict[str, list[dict[str, Any]]] = {}
    for nodeid, outcome in (summary.get("tests") or {}).items():
        leaf: dict[str, Any] = {"name": nodeid, "status": STATUS_OF_OUTCOME.get(outcome, str(outcome))}
        reason = reasons.get(junit_key(nodeid))
        if reason and outcome != "passed":
            leaf["details"] = {"reason": _cut(reason)}
        suites.setdefault(_suite(nodeid), []).append(leaf)
    return {
        "name": PLUGIN_ITEM,
        "status": verdict_status(verdict),
        "meta": {"type": "summary"},
        "details": {
            "verdict": verdict,
            "cluster": str(run.get("cluster") or ""),
            "driver": str(run.get("driver") or ""),
            "driver_version": str(run.get("driver_version") or ""),
            "kubernetes": str(run.get("cluster_version") or ""),
        },
        "items": [verdict_leaf, *({"name": suite, "items": leaves} for suite, leaves in sorted(suites.items()))],
    }


def without_summary(exit_code: int | None, last_lines: list[str]) -> dict[str, Any]:
    """The results tree of a run that wrote no summary (refused at preflight, crashed, or never started)."""
    ended = "never started" if exit_code is None else f"ended with exit code {exit_code}"
    last = last_lines[-1] if last_lines else "no output"
    return {
        "name": PLUGIN_ITEM,
        "status": protocol.FAILED,
        "meta": {"type": "summary"},
        "items": [
            {
                "name": f"dra-conformance run {ended} without a verdict: {_cut(last)}",
                "status": protocol.FAILED,
                "details": {"output": "\n".join(last_lines), "log": "run.log"},
            }
        ],
    }


def write(document: Mapping[str, Any], directory: Path) -> Path:
    """Write the results tree as the plugin's results file in `directory`."""
    path = directory / protocol.RESULTS_FILE
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False, width=120, allow_unicode=True))
    return path
