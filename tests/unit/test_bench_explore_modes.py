"""bench/explore_modes' pure parts: the explorer's record read back from its output, the verdict, the table.

The bench itself runs the explorer against every broken mode (minutes each): it is never run by tests.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dra_conformance import paths
from dra_conformance.explore import RECORD_KIND
from dra_conformance.model.records import RunRecords

sys.path.insert(0, str(paths.CHECKOUT / "bench"))
import bench_explore_modes
from bench_explore_modes import REFERENCE, ModeRun

LINES = [
    "explored with seed 7: 244 examples, 742 steps in 117.7 s (budget 90 s, 100 examples of up to 20 steps)",
    "operations: create claim 416, prepare (1 claim) 100",
    "finding: explore.answer-request-names-match-allocation broken at prepare: claim c1",
    "found in example 5, after 22 operations and 3.8 s",
    "sequence (shrunk, 2 steps, seed 7):",
    "  1. create c1 (claim-833): req-0: 1 device, req-1: 1 device",
    "  2. prepare ['c1'] -> ok",
    "reproduce: dra-conformance explore --profile p.yaml --replay 7 --max-examples 100 --max-steps 20",
]
FOUND: dict[str, Any] = {
    "examples": 244,
    "steps": 742,
    "shrink_examples": 239,
    "shrink_steps": 720,
    "operations": {"create claim": 416, "prepare (1 claim)": 100},
    "harness": None,
    "finding": {
        "obligation": "explore.answer-request-names-match-allocation",
        "steps": ["create c1", "prepare ['c1'] -> ok"],
        "found_after": {"examples": 5, "steps": 22, "seconds": 3.8},
    },
    "lines": LINES,
}
NOTHING: dict[str, Any] = {**FOUND, "finding": None, "lines": LINES[:2]}


def output_naming(run_dir: Path) -> str:
    """The end of an explore run's output as the CLI prints it: the summary's run line, then the explorer's lines."""
    return "\n".join(
        [
            "verdict: not certified (gpu.fake-dra.example.com, profile p.yaml)",
            f"  run: {run_dir} (summary.md, summary.json, junit.xml)",
            f"  next: the HTML report: dra-conformance report {run_dir} --serve",
            *LINES,
        ]
    )


def test_the_record_is_read_from_the_run_the_summary_names(tmp_path: Path) -> None:
    run_dir = tmp_path / "explore-20261206-020307" / "20261206-020308-7c3e"
    RunRecords(run_dir, "main").add(RECORD_KIND, FOUND)
    output = output_naming(run_dir)
    assert bench_explore_modes.run_dir_of(output) == run_dir
    assert bench_explore_modes.record_of(output) == FOUND
    assert bench_explore_modes.record_of("ERROR: the cluster did not start") is None
    assert bench_explore_modes.record_of(output_naming(tmp_path / "gone")) is None


def test_the_verdict_needs_both_the_exit_code_and_the_record() -> None:
    assert ModeRun("m", 1, 1.0, FOUND, "").verdict == "found"
    assert ModeRun("m", 0, 1.0, NOTHING, "").verdict == "not found"
    assert ModeRun("m", 1, 1.0, NOTHING, "").verdict == "no verdict (exit 1)"
    assert ModeRun("m", 0, 1.0, None, "").verdict == "no verdict (exit 0, no exploration recorded)"
    stuck = {**NOTHING, "harness": "the driver did not come back"}
    assert ModeRun("m", 1, 1.0, stuck, "").verdict == "no verdict (exit 1, the exploration could not go on)"


def test_the_report_has_a_row_per_run_the_score_and_the_found_sequences() -> None:
    runs = [
        ModeRun(REFERENCE, 0, 200.4, NOTHING, ""),
        ModeRun("answers-under-first-request", 1, 130.0, FOUND, ""),
        ModeRun("non-idempotent-prepare", 0, 210.0, NOTHING, "", note="a note"),
        ModeRun("leaves-sockets-on-sigterm", 2, 12.0, None, ""),
    ]
    lines = bench_explore_modes.report(runs, ["rbac-arbitrary-node (why)"])
    text = "\n".join(lines)
    row = next(line for line in lines if line.startswith("answers-under-first-request"))
    assert row.split() == [
        "answers-under-first-request",
        "found",
        "explore.answer-request-names-match-allocation",
        "5",  # examples explored, shrinking not counted
        "22",  # steps explored, shrinking not counted
        "2",  # the shrunk sequence
        "2",  # operation kinds covered
        "130",
    ], row
    assert "found 1 of 3 broken modes" in lines, text
    assert "skipped: rbac-arbitrary-node (why)" in lines, text
    assert "  reproduce: dra-conformance explore --profile p.yaml --replay 7 --max-examples 100 --max-steps 20" in lines
    assert "  2. prepare ['c1'] -> ok" in text, text
    noted = next(index for index, line in enumerate(lines) if line.startswith("non-idempotent-prepare"))
    assert lines[noted + 1].strip() == "a note", text
    assert "  leaves-sockets-on-sigterm: (no exploration recorded)" in lines, text
    assert bench_explore_modes.figures(runs)[0].value == 1


def test_a_finding_beside_a_stopped_exploration_is_found_and_says_why_it_stopped() -> None:
    stopped = ModeRun("m", 1, 1.0, {**FOUND, "harness": "reset between examples: the driver did not start"}, "")
    assert stopped.verdict == "found"
    lines = bench_explore_modes.table([stopped])
    assert lines[-1].strip() == "the exploration could not go on: reset between examples: the driver did not start"
