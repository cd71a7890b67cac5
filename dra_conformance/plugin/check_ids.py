"""Every check of the bundled suites is known by one id, `suites/<suite>/<file>::<name>`, wherever it is installed.

Pytest names a test by its path relative to the rootdir, or, outside it, relative to the argument it was collected
from. Run from a checkout that is `suites/allocation/test_allocation.py::...`; run from an installed package (a
vendor's CI, the suite's image in a pod) the bundled suites sit in site-packages, outside the directory the run
starts in, and the same check was `allocation/test_allocation.py::...` (or `.venv/lib/.../suites/...` with a venv
inside the project). The certification summary, its suites and selection, JUnit and the Allure report all read
the id, so the run from an installed package wrote no summary at all (found by the in-cluster Sonobuoy run). The
id is set at collection, before anything reads it (xdist's own `@group` suffix is added after this).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.errors import UsageError

SUITES_PREFIX = "suites"


def canonical_id(nodeid: str, path: Path, suites: Path) -> str | None:
    """The id of the test `nodeid` collected from `path` if that file is in the bundled `suites`, else None."""
    resolved = path.resolve()
    if not resolved.is_relative_to(suites):
        return None
    _, separator, rest = nodeid.partition("::")
    relative = resolved.relative_to(suites).as_posix()
    return f"{SUITES_PREFIX}/{relative}{separator}{rest}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each check of the bundled suites its canonical id."""
    try:
        suites = paths.suites_dir().resolve()
    except UsageError:
        return  # a broken install: nothing of ours is collected from it
    for item in items:
        canonical = canonical_id(item.nodeid, Path(item.path), suites)
        if canonical is not None and canonical != item.nodeid:
            item._nodeid = canonical  # the one attribute pytest and xdist read the id from
