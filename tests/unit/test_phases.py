"""`--dra-phases-file`: one JSON line per test phase, with the waits that ended in it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dra_conformance import paths

sys.path.insert(0, str(paths.CHECKOUT / "bench"))
import phases_report

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


def test_the_phases_report_splits_each_test_into_its_own_work_and_its_waits(tmp_path: Path) -> None:
    records = [
        {"nodeid": "t::a", "phase": "setup", "duration": 5.0, "outcome": "passed", "waits": [_wait("cluster", 4.0)]},
        {"nodeid": "t::a", "phase": "call", "duration": 3.0, "outcome": "passed", "waits": [_wait("pod bound", 2.5)]},
        {"nodeid": "t::a", "phase": "teardown", "duration": 1.0, "outcome": "passed", "waits": []},
        {"nodeid": "t::b", "phase": "setup", "duration": 0.5, "outcome": "passed", "waits": []},
        {
            "nodeid": "t::b",
            "phase": "call",
            "duration": 9.0,
            "outcome": "failed",
            "waits": [_wait("never", 9.0, False)],
        },
        {"nodeid": "t::b", "phase": "teardown", "duration": 0.5, "outcome": "passed", "waits": []},
    ]
    path = tmp_path / "phases.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    tests = {test.nodeid: test for test in phases_report.read(path)}
    a = tests["t::a"]
    assert (a.setup, a.api_work, a.waits, a.teardown) == pytest.approx((1.0, 0.5, 6.5, 1.0)), a
    lines = phases_report.render(list(tests.values()))
    largest = lines[lines.index("the 10 largest waits:") + 1 :]
    assert largest[0].strip().startswith("9.00 s of 60 s, timed out: never"), largest
    assert [line.split(": ", 1)[1].split("  (")[0] for line in largest] == ["never", "cluster", "pod bound"], largest


def _wait(what: str, seconds: float, met: bool = True) -> dict[str, object]:
    return {"what": what, "seconds": seconds, "deadline": 60.0, "met": met}
