"""Pass rates over repeated runs: a test that failed once is flaky, never passed."""

from __future__ import annotations

import json
from pathlib import Path

from dra_conformance.report.flakes import flake_record, read_outcomes, render, write_flake_record


def test_a_single_failure_makes_a_test_flaky_and_not_applicable_runs_do_not_count() -> None:
    runs = [
        {"a": "passed", "b": "passed", "c": "not applicable"},
        {"a": "failed", "b": "passed", "c": "not applicable"},
        {"a": "passed", "b": "passed", "c": "passed"},
    ]
    record = flake_record(runs)
    assert record["flaky"] == ["a"] and record["failing"] == []
    assert record["tests"]["a"]["pass_rate"] == round(2 / 3, 4)
    assert record["tests"]["c"] == {"passed": 1, "failed": 0, "other": 2, "pass_rate": 1.0, "state": "stable"}
    assert "flaky: a passed 2/3" in "\n".join(render(record))


def test_a_test_failing_every_time_is_failing_and_a_run_without_results_is_counted_missing(tmp_path: Path) -> None:
    first = tmp_path / "one.json"
    first.write_text(json.dumps({"tests": {"x": "failed"}}))
    record = flake_record(read_outcomes([first, tmp_path / "absent.json"]))
    assert record["failing"] == ["x"] and record["missing_runs"] == 1 and record["runs"] == 2


def test_the_markdown_record_lists_every_test_with_its_pass_rate_unstable_first(tmp_path: Path) -> None:
    runs = [{"b": "passed", "a": "passed", "n": "not applicable"}, {"b": "failed", "a": "passed", "n": "skipped"}]
    write_flake_record(flake_record(runs), tmp_path)
    markdown = (tmp_path / "flake-record.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `b` | 1 | 1 | 0 | 50% | flaky |",
        "| `a` | 2 | 0 | 0 | 100% | stable |",
        "| `n` | 0 | 0 | 2 | - | never ran |",
    ], markdown
    assert "1 tests never passed or failed: skipped or not applicable in every run" in markdown, markdown
