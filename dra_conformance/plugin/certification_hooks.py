"""Collecting every test's outcome in the controller and writing the certification summary at the end of the run."""

from __future__ import annotations

from typing import Any

import pytest

from dra_conformance import __version__
from dra_conformance.plugin import stash
from dra_conformance.report.certification import (
    CheckResult,
    RunFacts,
    merge,
    outcome_of,
    summarize,
    terminal_lines,
    write_summary,
)

CAPABILITY_PROPERTY = "capabilities"
COLLECTOR_NAME = "dra-conformance-certification"


def pytest_configure(config: pytest.Config) -> None:
    """Register the capability marker, and in the controller the collector of outcomes."""
    config.addinivalue_line("markers", "capability(*names): the declared driver capabilities this check exercises")
    if not stash.is_worker(config):
        config.pluginmanager.register(OutcomeCollector(config), COLLECTOR_NAME)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Carry each check's capabilities in its user properties, which reach the controller with every report."""
    for item in items:
        names = [name for marker in item.iter_markers("capability") for name in marker.args]
        if names:
            item.user_properties.append((CAPABILITY_PROPERTY, ",".join(sorted(set(names)))))


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


class OutcomeCollector:
    """Folds every phase report (the controller sees every worker's) into one result per test."""

    def __init__(self, config: pytest.Config) -> None:
        """Collect for the run configured by `config`."""
        self.config = config
        self.results: dict[str, CheckResult] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """One phase (setup, call, teardown) of one test."""
        found = outcome_of(report.when, report.passed, report.skipped, _skip_reason(report) if report.skipped else "")
        if found is None:
            return
        properties = dict(report.user_properties)
        capabilities = tuple(filter(None, str(properties.get(CAPABILITY_PROPERTY, "")).split(",")))
        self.results[report.nodeid] = merge(self.results.get(report.nodeid), report.nodeid, found, capabilities)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """After the other report sections: write summary.{md,json} and print the verdict."""
        config = self.config
        # The verdict is about the conformance suites; the project's own tests (tests/) say nothing about a driver.
        results = [r for r in self.results.values() if "suites/" in r.nodeid.split("::", 1)[0]]
        if stash.RUN_DIR not in config.stash or stash.PROFILE not in config.stash or not results:
            return
        if config.getoption("collectonly"):
            return
        profile = config.stash[stash.PROFILE]
        suite = config.stash[stash.SUITE_CONFIG]
        facts = RunFacts(
            suite_version=__version__,
            backend=suite.backend,
            driver=profile.driver,
            profile=profile.source.name,
            profile_digest=profile.digest,
            driver_version=profile.version,
            declared=tuple(sorted(str(c) for c in profile.capabilities)),
        )
        run_dir = config.stash[stash.RUN_DIR]
        summary = summarize(results, facts, run_dir)
        write_summary(summary, run_dir)
        terminalreporter.section("certification summary")
        for line in terminal_lines(summary):
            terminalreporter.line(line, red=summary["verdict"] == "not certified")
