"""`--dra-phases-file`: one JSON line per test phase, with the waits that ended in it."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import pytest
from dra_conformance.errors import WaitTimeout
from dra_conformance.kube import waits

@pytest.fixture
def ready_thing():
    yield waits.until(lambda: 3, lambda n: n == 3, timeout=5, what="thing ready")
    waits.until(lambda: True, bool, timeout=5, what="thing gone")

def test_waits_in_every_phase(ready_thing):
    with pytest.raises(WaitTimeout):
        waits.until(lambda: 0, bool, timeout=0.2, what="never")
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_every_phase_has_its_line_with_the_waits_that_ended_in_it(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    pytester.makepyfile(test_phases_demo=TESTS)
    result = pytester.runpytest_subprocess("--dra-phases-file=phases.jsonl", "-p", "no:cacheprovider", *workers)
    lines = [json.loads(line) for line in (pytester.path / "phases.jsonl").read_text().splitlines()]
    assert [line["phase"] for line in lines] == ["setup", "call", "teardown"], (lines, result.stdout.str())
    waited = {line["phase"]: [(w["what"], w["met"]) for w in line["waits"]] for line in lines}
    assert waited == {
        "setup": [("thing ready", True)],
        "call": [("never", False)],
        "teardown": [("thing gone", True)],
    }, waited
    never = lines[1]["waits"][0]
    assert never["deadline"] == 0.2 and never["seconds"] >= 0.2, never
    assert all(line["nodeid"].endswith("::test_waits_in_every_phase") for line in lines), lines
