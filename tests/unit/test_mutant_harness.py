"""The mutation harness reads which checks failed from a run's JUnit, as pytest writes it."""

from __future__ import annotations

from pathlib import Path

from tests.mutants.harness import junit_results

# What pytest's junitxml writes for a test whose call failed and whose fixture teardown then raised: two
# <testcase> elements of the same name, the call's failure first.
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase name="test_caught"><failure message="contract: unprepare succeeds"/></testcase>
  <testcase name="test_caught"><error message="failed on teardown with leftovers"/></testcase>
  <testcase name="test_clean_call"/>
  <testcase name="test_clean_call"><error message="failed on teardown"/></testcase>
  <testcase name="test_fine"/>
  <testcase name="test_na"><skipped message="not applicable: x"/></testcase>
</testsuite></testsuites>
"""


def test_the_call_failure_is_kept_over_a_later_teardown_error_and_a_test_with_an_error_is_not_passed(
    tmp_path: Path,
) -> None:
    run = tmp_path / "reports" / "20261201-000000-abcd"
    run.mkdir(parents=True)
    (run / "junit.xml").write_text(JUNIT)
    failed, passed = junit_results(tmp_path / "reports")
    assert failed == {
        "test_caught": "contract: unprepare succeeds",
        "test_clean_call": "failed on teardown",
    }, failed
    assert passed == ("test_fine",), passed
