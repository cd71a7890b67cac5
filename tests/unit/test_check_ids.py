"""A bundled check has one id, `suites/<suite>/<file>::<name>`, however pytest reached its file."""

from __future__ import annotations

from pathlib import Path

from dra_conformance.plugin.check_ids import canonical_id


def test_a_check_collected_relative_to_the_suites_argument_gets_its_suites_path(tmp_path: Path) -> None:
    suites = tmp_path / "site-packages" / "dra_conformance" / "suites"
    check = suites / "allocation" / "test_allocation.py"
    check.parent.mkdir(parents=True)
    check.touch()
    expected = "suites/allocation/test_allocation.py::test_x[one]"
    assert canonical_id("allocation/test_allocation.py::test_x[one]", check, suites) == expected
    assert canonical_id("::test_x[one]", check, suites) == expected, "collected from the file itself"
    assert canonical_id(
        ".venv/lib/dra_conformance/suites/allocation/test_allocation.py::test_x[one]", check, suites
    ) == (expected)
    assert canonical_id(expected, check, suites) == expected, "a checkout's id stays as it is"


def test_a_projects_own_test_keeps_its_id(tmp_path: Path) -> None:
    suites = tmp_path / "dra_conformance" / "suites"
    suites.mkdir(parents=True)
    own = tmp_path / "project" / "suites" / "test_mine.py"
    own.parent.mkdir(parents=True)
    own.touch()
    assert canonical_id("suites/test_mine.py::test_mine", own, suites) is None
