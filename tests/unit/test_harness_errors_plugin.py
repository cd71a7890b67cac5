"""No failure without an obligation, end to end: what a check raises that no obligation names is a harness error."""

from __future__ import annotations

import json

import pytest

from dra_conformance.report.harness_errors import HARNESS_ERROR

pytest_plugins = ["pytester"]

# Three checks that raise what no obligation names (in the call, by a bare assert, in a fixture's teardown) and one
# that passes. Each phase runs on an xdist worker: the obligation must reach the controller in the report.
SUITE = """
import pytest

@pytest.fixture
def leaky():
    yield
    raise ValueError("cleanup found something it did not expect")

def test_key_error():
    {}["missing"]

def test_bare_assert():
    assert 1 == 2, "observed 1"

def test_teardown_error(leaky):
    pass

def test_passes():
    pass
"""


def test_checks_raising_what_no_obligation_names_make_the_run_incomplete_with_their_tracebacks(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "suites" / "demo").mkdir(parents=True)
    (pytester.path / "suites" / "__init__.py").write_text("")
    (pytester.path / "suites" / "demo" / "test_demo.py").write_text(SUITE)
    reports = pytester.path / "out"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--dra-reports-dir={reports}", "-n", "2", "suites"
    )
    output = result.stdout.str()
    summaries = list(reports.rglob("summary.json"))
    assert len(summaries) == 1, f"{sorted(reports.rglob('*'))}\n{output}"
    summary = json.loads(summaries[0].read_text())
    assert summary["verdict"] == "incomplete", (summary["reasons"], output)
    # A demo project is a subset of the bundled suites: that reason comes first, then the harness errors.
    assert summary["reasons"][-1].startswith(f"3 harness error(s) ({HARNESS_ERROR}), e.g. suites/demo/"), summary[
        "reasons"
    ]
    assert summary["totals"] == {"error": 3, "passed": 1}, summary["totals"]
    errors = {e["check"].rsplit("::", 1)[1]: e for e in summary["harness_errors"]}
    assert sorted(errors) == ["test_bare_assert", "test_key_error", "test_teardown_error"], errors
    assert all(e["obligation"] == HARNESS_ERROR for e in errors.values()), errors
    assert "KeyError: 'missing'" in errors["test_key_error"]["traceback"], errors["test_key_error"]
    assert "observed 1" in errors["test_bare_assert"]["traceback"], errors["test_bare_assert"]
    assert "ValueError: cleanup found" in errors["test_teardown_error"]["traceback"], errors["test_teardown_error"]
    markdown = (summaries[0].parent / "summary.md").read_text()
    assert f"## Harness errors ({HARNESS_ERROR}" in markdown and "E       KeyError: 'missing'" in markdown, markdown
    assert "no registry obligation" not in summaries[0].read_text() + markdown
    assert "verdict: incomplete" in output, output
