"""The third-party writers of the run's reports (Allure results, JUnit XML) on a full file system: no traceback storm.

Allure writes a file per test through its own plugin manager, JUnit writes junit.xml at session end; either failing
for lack of space ends pytest in an INTERNALERROR that takes the run's verdict with it. Here a write that fails
because the file system is full is dropped instead, its scratch file removed, and noted: the run goes on to its
verdict (written first, `report.certification.write_summary`) and the end of the run says, in one line, what was
not written, where, and the space left.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import allure_commons
import pytest
from _pytest.junitxml import xml_key

from dra_conformance.plugin import stash
from dra_conformance.report import reports_space
from dra_conformance.report.reports_space import full_line, is_full

# Allure's scratch file of a result or attachment being written (renamed over the result once whole).
ALLURE_SCRATCH = "*.tmp"
# The writes a full file system stopped, as `full_line`s; present once the guard is on.
DROPPED = pytest.StashKey[list[str]]()
# The guard registered with Allure's plugin manager, unregistered when the run ends.
ALLURE_GUARD = pytest.StashKey[object]()
# Where this guard wrote junit.xml in JUnit's stead (JUnit's own terminal line then comes from here).
JUNIT_WRITTEN = pytest.StashKey[str]()


class _AllureGuard:
    """Wraps each of Allure's file writes: a full file system drops the write instead of raising."""

    def __init__(self, results: Path, dropped: list[str]) -> None:
        self.results = results
        self.dropped = dropped

    def _guard(self) -> Generator[None, Any, Any]:
        try:
            return (yield)
        except OSError as error:
            if not is_full(error):
                raise
            for scratch in self.results.glob(ALLURE_SCRATCH):
                scratch.unlink(missing_ok=True)
            self.dropped.append(full_line(Path(error.filename or self.results), error))
            return None

    @allure_commons.hookimpl(wrapper=True)
    def report_result(self, result: Any) -> Generator[None, Any, Any]:
        return (yield from self._guard())

    @allure_commons.hookimpl(wrapper=True)
    def report_container(self, container: Any) -> Generator[None, Any, Any]:
        return (yield from self._guard())

    @allure_commons.hookimpl(wrapper=True)
    def report_attached_file(self, source: Any, file_name: Any) -> Generator[None, Any, Any]:
        return (yield from self._guard())

    @allure_commons.hookimpl(wrapper=True)
    def report_attached_data(self, body: Any, file_name: Any) -> Generator[None, Any, Any]:
        return (yield from self._guard())


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """In an opted-in run that writes reports, guard Allure's writes (after Allure registered its writer)."""
    if not stash.opted_in(config) or stash.RUN_DIR not in config.stash:
        return
    dropped: list[str] = []
    config.stash[DROPPED] = dropped
    if not stash.is_worker(config):
        problem = reports_space.reserve(config.stash[stash.RUN_DIR])
        if problem is not None:
            dropped.append(problem)
    results = getattr(config.option, "allure_report_dir", None)
    if results:
        guard = _AllureGuard(Path(results), dropped)
        allure_commons.plugin_manager.register(guard)
        config.stash[ALLURE_GUARD] = guard


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write junit.xml in JUnit's stead, so that a full file system drops it (no half file) instead of raising."""
    config = session.config
    xml = config.stash.get(xml_key, None)
    if DROPPED not in config.stash or xml is None or stash.is_worker(config):
        return
    logfile = Path(xml.logfile)
    # Its later hooks (terminal summary, unconfigure) are ours now; its session end, already under way in this very
    # call, writes to the null device instead.
    config.pluginmanager.unregister(xml)
    del config.stash[xml_key]
    try:
        xml.pytest_sessionfinish()
    except OSError as error:
        if not is_full(error):
            raise
        logfile.unlink(missing_ok=True)
        config.stash[DROPPED].append(full_line(logfile, error))
    else:
        config.stash[JUNIT_WRITTEN] = str(logfile)
    finally:
        xml.logfile = os.devnull


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Say where junit.xml went (as JUnit would), and in one line what a full file system kept from being written."""
    written = config.stash.get(JUNIT_WRITTEN, None)
    if written is not None:
        terminalreporter.write_sep("-", f"generated xml file: {written}")
    dropped = config.stash.get(DROPPED, [])
    if dropped:
        more = f" (and {len(dropped) - 1} more writes)" if len(dropped) > 1 else ""
        terminalreporter.line(f"dra-conformance: {dropped[0]}{more}", red=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Unregister the Allure guard; give back the verdict's space if the run ended before its verdict."""
    if DROPPED in config.stash and not stash.is_worker(config):
        reports_space.release(config.stash[stash.RUN_DIR])
    guard = config.stash.get(ALLURE_GUARD, None)
    if guard is not None:
        allure_commons.plugin_manager.unregister(guard)
        del config.stash[ALLURE_GUARD]
