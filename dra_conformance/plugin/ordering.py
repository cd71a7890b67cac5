"""Checks whose length a fixed span sets (a toleration, the scheduler's poll) start first, longest first.

Under `-n 2` the run ends when its last check does; a six-second wait collected last ends the run with the other
worker idle. xdist hands out one check at a time as a worker runs low, so the order of collection is the order of
start: starting the fixed waits first lets the short checks fill in around them.
"""

from __future__ import annotations

import pytest

MARKER = "waits_out"


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(seconds, span): the check waits out a fixed span of about this many seconds that is not the "
        "driver's to shorten (named by `span`); such checks start first, longest first",
    )


def fixed_wait(item: pytest.Item) -> float:
    """The longest fixed span `item` says it waits out; 0 for a check that names none."""
    return max((float(marker.args[0]) for marker in item.iter_markers(MARKER)), default=0.0)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the checks that wait out fixed spans first, longest first; the rest keep their order (a stable sort)."""
    items.sort(key=lambda item: -fixed_wait(item))
