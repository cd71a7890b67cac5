"""Checks that wait out fixed spans are collected first, longest first; the others keep their order."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import pytest

def test_short_first():
    pass

@pytest.mark.waits_out(2, "a short span")
def test_waits_two():
    pass

def test_short_second():
    pass

@pytest.mark.waits_out(6, "a toleration")
def test_waits_six():
    pass
"""


def test_fixed_waits_start_first_longest_first_and_the_rest_keep_their_order(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ordering_demo=TESTS)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", "--strict-markers")
    collected = [line.split("::")[-1] for line in result.stdout.lines if "::" in line]
    assert collected == ["test_waits_six", "test_waits_two", "test_short_first", "test_short_second"], (
        result.stdout.str()
    )
