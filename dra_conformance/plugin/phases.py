"""`--dra-phases-file`: where each test's time goes, as JSON lines (one per test phase), for bench/suites.

A line holds the test's node id, the phase (setup, call, teardown), its duration, and every wait that ended in it
(`kube.waits.until` logs each one: what it waited for, how long, under which deadline, whether it was met). Session
fixtures (the cluster's start) are set up inside the first test that needs them and count in its setup. Lines are
appended under an exclusive lock, so xdist workers share one file.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.kube import waits

PLUGIN_NAME = "dra_conformance_phases"


class WaitRecorder(logging.Handler):
    """Keeps the waits `kube.waits` logs until the phase they ended in is reported."""

    def __init__(self) -> None:
        """Record at DEBUG, the level waits are logged at."""
        super().__init__(logging.DEBUG)
        self.waits: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep a wait's fields; other records of the logger are not waits."""
        fields = record.__dict__
        if "wait_what" in fields:
            self.waits.append(
                {
                    "what": fields["wait_what"],
                    "seconds": round(float(fields["wait_seconds"]), 4),
                    "deadline": fields["wait_deadline"],
                    "met": fields["wait_met"],
                }
            )

    def take(self) -> list[dict[str, Any]]:
        """The waits recorded since the last call."""
        taken, self.waits = self.waits, []
        return taken


class PhaseProfile:
    """Writes one line per test phase to `path`; registered only when `--dra-phases-file` is given."""

    def __init__(self, path: Path) -> None:
        """Append to `path` (created if missing)."""
        self.path = path
        self.recorder = WaitRecorder()
        self._level = waits.LOG.level

    def start(self) -> None:
        """Record the waits from now on."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        waits.LOG.addHandler(self.recorder)
        waits.LOG.setLevel(logging.DEBUG)

    def stop(self) -> None:
        """Stop recording; the logger's level is what it was."""
        waits.LOG.removeHandler(self.recorder)
        waits.LOG.setLevel(self._level)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        """After each phase of a test, in the process that ran it: write the phase's line."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        line = {
            "nodeid": report.nodeid,
            "phase": report.when,
            "duration": round(report.duration, 4),
            "outcome": report.outcome,
            "waits": self.recorder.take(),
        }
        with self.path.open("a") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            out.write(json.dumps(line) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    """Register the phase profile when the run asks for it."""
    path = config.getoption("--dra-phases-file")
    if path is None:
        return
    profile = PhaseProfile(Path(path).resolve())
    profile.start()
    config.pluginmanager.register(profile, PLUGIN_NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop recording waits."""
    profile = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if isinstance(profile, PhaseProfile):
        profile.stop()
