"""Flake accounting over repeated runs: the pass rate of every test, and a failure is never hidden by a rerun.

Each run writes its per-test outcomes into its summary.json; this module reads them back. A test that failed in
any run and passed in another is flaky, one that failed in every run it ran in is failing: neither counts as
passed. Runs where a test was not applicable or skipped do not count towards its rate.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

FLAKE_JSON = "flake-record.json"
FLAKE_MARKDOWN = "flake-record.md"


def read_outcomes(summary_files: list[Path]) -> list[dict[str, str]]:
    """Per run (in order): test id -> outcome, from each run's summary.json; a run without one counts as none."""
    runs = []
    for path in summary_files:
        runs.append(dict(json.loads(path.read_text()).get("tests", {})) if path.exists() else {})
    return runs


def flake_record(runs: list[dict[str, str]]) -> dict[str, Any]:
    """Per test: runs, passes, failures and its pass rate; the tests that are flaky or failing."""
    tests: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "other": 0})
    for run in runs:
        for nodeid, outcome in run.items():
            key = outcome if outcome in ("passed", "failed") else "other"
            tests[nodeid][key] += 1
    rows = {}
    for nodeid, counts in sorted(tests.items()):
        counted = counts["passed"] + counts["failed"]
        if counts["failed"] and counts["passed"]:
            state = "flaky"
        elif counts["failed"]:
            state = "failing"
        elif counted:
            state = "stable"
        else:
            state = "never ran"
        rate = round(counts["passed"] / counted, 4) if counted else None
        rows[nodeid] = {**counts, "pass_rate": rate, "state": state}
    unstable = {n: r for n, r in rows.items() if r["state"] in ("flaky", "failing")}
    return {
        "runs": len(runs),
        "missing_runs": sum(1 for run in runs if not run),
        "tests": rows,
        "flaky": sorted(n for n, r in unstable.items() if r["state"] == "flaky"),
        "failing": sorted(n for n, r in unstable.items() if r["state"] == "failing"),
        "stable": sum(1 for r in rows.values() if r["state"] == "stable"),
    }


def render(record: dict[str, Any]) -> list[str]:
    """Lines for the terminal and the Markdown file: totals, then every test below 100 %."""
    lines = [
        f"flake record over {record['runs']} runs ({record['missing_runs']} without results): "
        f"{record['stable']} tests passed every time, {len(record['flaky'])} flaky, {len(record['failing'])} failing"
    ]
    for nodeid in record["flaky"] + record["failing"]:
        row = record["tests"][nodeid]
        lines.append(f"  {row['state']}: {nodeid} passed {row['passed']}/{row['passed'] + row['failed']}")
    never = sum(1 for row in record["tests"].values() if row["state"] == "never ran")
    if never:
        lines.append(f"  {never} tests never passed or failed: skipped or not applicable in every run")
    return lines


def table(record: dict[str, Any]) -> list[str]:
    """A Markdown table of every test's pass rate: flaky and failing first, then by test id."""
    order = {"flaky": 0, "failing": 1, "stable": 2, "never ran": 3}
    rows = sorted(record["tests"].items(), key=lambda item: (order[item[1]["state"]], item[0]))
    lines = ["| test | passed | failed | skipped or n/a | pass rate | state |", "|---|---|---|---|---|---|"]
    for nodeid, row in rows:
        rate = "-" if row["pass_rate"] is None else f"{row['pass_rate']:.0%}"
        lines.append(f"| `{nodeid}` | {row['passed']} | {row['failed']} | {row['other']} | {rate} | {row['state']} |")
    return lines


def write_flake_record(record: dict[str, Any], directory: Path) -> None:
    """flake-record.json and flake-record.md in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / FLAKE_JSON).write_text(json.dumps(record, indent=2))
    body = "\n".join(f"- {line.strip()}" for line in render(record))
    rates = "\n".join(table(record))
    (directory / FLAKE_MARKDOWN).write_text(f"# Flake record\n\n{body}\n\n## Pass rate per test\n\n{rates}\n")
