"""Where a suite run's time goes, from the JSON lines `--dra-phases-file` writes (bench/suites --profile-phases).

Per test, its time splits into setup, API work (the test's call), waits and teardown: a wait counts as a wait in
whichever phase it ended, and the rest of each phase is that phase's own work. Session fixtures (the cluster's
start) are set up inside the first test that needs them, so they show in that test's setup.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Waits printed by size, and tests printed by their total.
TOP_WAITS = 10
TOP_TESTS = 5


@dataclass
class TestTime:
    """One test's time, split by where it went (seconds)."""

    nodeid: str
    setup: float = 0.0
    api_work: float = 0.0
    waits: float = 0.0
    teardown: float = 0.0
    wait_list: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total(self) -> float:
        """All of the test's phases."""
        return self.setup + self.api_work + self.waits + self.teardown


def read(path: Path) -> list[TestTime]:
    """Every test of the phases file, in the order its first phase was written."""
    tests: dict[str, TestTime] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        test = tests.setdefault(record["nodeid"], TestTime(record["nodeid"]))
        waited = sum(float(w["seconds"]) for w in record["waits"])
        own = max(0.0, float(record["duration"]) - waited)
        if record["phase"] == "setup":
            test.setup += own
        elif record["phase"] == "call":
            test.api_work += own
        else:
            test.teardown += own
        test.waits += waited
        test.wait_list += [{**w, "nodeid": record["nodeid"], "phase": record["phase"]} for w in record["waits"]]
    return list(tests.values())


def render(tests: list[TestTime]) -> list[str]:
    """The report's lines: totals by category, by deadline, the largest tests and the ten largest waits."""
    total = sum(t.total for t in tests) or 1.0
    lines = [f"phases of {len(tests)} tests, {total:.1f} s of test time in all (summed over workers):"]
    for label, seconds in (
        ("setup", sum(t.setup for t in tests)),
        ("API work (call)", sum(t.api_work for t in tests)),
        ("waits", sum(t.waits for t in tests)),
        ("teardown", sum(t.teardown for t in tests)),
    ):
        lines.append(f"  {label:<16} {seconds:8.1f} s  {100 * seconds / total:5.1f} %")
    by_deadline: dict[float, list[float]] = defaultdict(list)
    for test in tests:
        for wait in test.wait_list:
            by_deadline[float(wait["deadline"])].append(float(wait["seconds"]))
    lines.append("waits by deadline:")
    for deadline, spent in sorted(by_deadline.items(), key=lambda item: -sum(item[1])):
        lines.append(f"  deadline {deadline:g} s: {len(spent)} waits, {sum(spent):.1f} s, longest {max(spent):.2f} s")
    lines.append(f"the {TOP_TESTS} longest tests (setup / API work / waits / teardown):")
    for test in sorted(tests, key=lambda t: -t.total)[:TOP_TESTS]:
        lines.append(
            f"  {test.total:6.1f} s  {test.setup:.1f} / {test.api_work:.1f} / {test.waits:.1f} / {test.teardown:.1f}"
            f"  {test.nodeid}"
        )
    waits = sorted((w for t in tests for w in t.wait_list), key=lambda w: -float(w["seconds"]))[:TOP_WAITS]
    lines.append(f"the {TOP_WAITS} largest waits:")
    for wait in waits:
        ended = "" if wait["met"] else ", timed out"
        lines.append(
            f"  {float(wait['seconds']):6.2f} s of {float(wait['deadline']):g} s{ended}: {wait['what']}"
            f"  ({wait['nodeid']}, {wait['phase']})"
        )
    return lines
