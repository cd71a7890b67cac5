"""One part of an in-cluster run: the cluster-level checks (the Job plugin) or one node's node-level checks.

`dra-conformance sonobuoy run` splits the bundled suites in two by pytest selection. A check is node-level when it
needs the driver's sockets or the node's kubelet root: it requests one of NODE_FIXTURES (the socket checks of
`suites/protocol`, the kubelet-side interposer, the four-layer cross-check, the rolling update, the scenario runs
that play the kubelet). Those run in the DaemonSet plugin on each driver node, where the kubelet root is mounted at
its own path, so the suite's "sockets share this machine" path (`driver/node_sockets.py`, `kubelet/node_agent.py`)
reaches them in place. Everything else runs once, in the Job plugin.

This module is the pytest plugin both parts load (`-p dra_conformance.sonobuoy.part`): it marks node-level checks
with NODE_MARKER, so that each plugin definition selects its part with `-m`, and in the run's controller it records
every check's outcome with what the verdict needs of it (capabilities, the obligation that decided it, the reason)
and what the part set out to run. `sonobuoy/merge.py` merges the parts' records into one verdict.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.report.certification import PHASES, merge, outcome_of, phase_reason
from dra_conformance.verdict import WORKER_CRASH, CheckResult

NODE_MARKER = "node_level"
# The fixtures that reach the driver's sockets or the node's kubelet root (dra_conformance/plugin/driver_fixtures.py).
NODE_FIXTURES = frozenset({"real_node", "interposer", "driver_sockets", "driver_client", "kubelet"})
RECORD_OPTION = "--dra-part-record"
# The file each part writes its record to, beside its summary.
RECORD_FILE = "part-record.json"
# The report properties the certification hooks set (dra_conformance/plugin/certification_hooks.py, which this
# package may not import; tests/unit/test_sonobuoy_parts.py keeps them in step).
CAPABILITY_PROPERTY = "capabilities"
OBLIGATION_PROPERTY = "obligation"
BASIS_PROPERTY = "obligation_basis"
OBLIGATION_CAPABILITY_PROPERTY = "obligation_capability"


class Part(StrEnum):
    """Which checks a plugin's run holds."""

    # Every check, in one Job (`dra-conformance sonobuoy-plugin` without --part).
    WHOLE = "whole"
    CLUSTER = "cluster"
    NODE = "node"


def marker_expression(part: Part) -> str | None:
    """The `-m` expression that selects `part` (None: no selection)."""
    if part is Part.WHOLE:
        return None
    return NODE_MARKER if part is Part.NODE else f"not {NODE_MARKER}"


def selection_args(part: Part) -> tuple[str, ...]:
    """The pytest arguments of `part`'s run: this plugin, and the marker expression that selects the part."""
    expression = marker_expression(part)
    return () if expression is None else ("-p", __name__, "-m", expression)


def is_node_level(fixturenames: list[str] | tuple[str, ...]) -> bool:
    """Whether a check that requests `fixturenames` needs the driver's sockets or the node's kubelet root."""
    return not NODE_FIXTURES.isdisjoint(fixturenames)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Where the controller writes the part's record."""
    parser.getgroup("dra-conformance", "DRA conformance").addoption(
        RECORD_OPTION,
        type=Path,
        default=None,
        help="(a part of an in-cluster run) write every check's outcome, capabilities and obligation to this file",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; in the controller, record the run where asked."""
    config.addinivalue_line(
        "markers",
        f"{NODE_MARKER}: the check needs the driver's sockets or the node's kubelet root (marked by "
        "dra_conformance.sonobuoy.part from the fixtures it requests)",
    )
    path = config.getoption(RECORD_OPTION)
    if path is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(PartRecorder(config, Path(path)), "dra-conformance-part-record")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the node-level checks before `-m` selects (first, so the mark plugin's deselection sees them)."""
    for item in items:
        if is_node_level(getattr(item, "fixturenames", ())):
            item.add_marker(NODE_MARKER)


class PartRecorder:
    """Folds the phase reports the controller sees into one result per check, as the certification summary does."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        """Record the run of `config` into `path`."""
        self.config, self.path = config, path
        self.results: dict[str, CheckResult] = {}
        self.collected: list[str] | None = None
        self.stopped = ""

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Without xdist the controller collects: what it kept after `-m`."""
        if session.items:
            self.collected = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """With xdist every worker collects the same checks; the first answer is the selection."""
        if self.collected is None:
            self.collected = list(ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """One phase of one check."""
        properties = dict(report.user_properties)
        reason = phase_reason(report)
        found = outcome_of(report.when, report.passed, report.skipped, reason, str(properties.get(BASIS_PROPERTY, "")))
        if found is None:
            return
        if report.when not in PHASES:
            properties[OBLIGATION_PROPERTY] = WORKER_CRASH
        capabilities = tuple(filter(None, str(properties.get(CAPABILITY_PROPERTY, "")).split(",")))
        obligation = (
            str(properties.get(OBLIGATION_PROPERTY, "")),
            str(properties.get(OBLIGATION_CAPABILITY_PROPERTY, "")),
        )
        self.results[report.nodeid] = merge(
            self.results.get(report.nodeid), report.nodeid, found, capabilities, obligation
        )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Why the part ended early, if it did."""
        if session.shouldstop or session.shouldfail:
            self.stopped = str(session.shouldstop or session.shouldfail)
        elif exitstatus == pytest.ExitCode.INTERRUPTED:
            self.stopped = "interrupted"

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Write the record (the bundled suites' checks only: the project's own tests say nothing of a driver)."""
        record = {
            "collected": [nodeid for nodeid in self.collected or [] if _bundled(nodeid)],
            "filters": {"-k": config.option.keyword or "", "-m": config.option.markexpr or ""},
            "stopped": self.stopped,
            "checks": [asdict(result) for nodeid, result in sorted(self.results.items()) if _bundled(nodeid)],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def _bundled(nodeid: str) -> bool:
    return "suites/" in nodeid.split("::", 1)[0]


def read_record(document: dict[str, Any]) -> tuple[list[str], dict[str, str], str, dict[str, CheckResult]]:
    """A record's collected checks, filters, why it stopped, and results by check."""
    checks = {}
    for entry in document.get("checks") or []:
        result = CheckResult.from_json(entry)
        checks[result.nodeid] = result
    filters = {str(k): str(v) for k, v in (document.get("filters") or {}).items()}
    return list(document.get("collected") or []), filters, str(document.get("stopped") or ""), checks
