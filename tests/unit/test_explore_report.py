"""The explored space in the run's summary (report.exploration): from the explorer's run records, no cluster."""

from __future__ import annotations

import json
from pathlib import Path

from dra_conformance.explore import RECORD_KIND
from dra_conformance.model.records import RunRecords
from dra_conformance.report.exploration import exploration_markdown, exploration_terminal_line, explored_space

RECORD = {
    "check": "suites/explore/test_explore.py::test_x",
    "node": "kwok-set-aside-0",
    "reproduce": "dra-conformance explore --profile p.yaml --replay 7 --max-examples 50 --max-steps 12",
    "seed": 7,
    "budget": {"seconds": 60.0, "max_examples": 50, "max_steps": 12, "shrink_seconds": 60.0},
    "seconds": 61.2,
    "examples": 9,
    "steps": 80,
    "shrink_examples": 4,
    "shrink_steps": 20,
    "invariant_checks": 250,
    "stated": 1900,
    "operations": {"create claim": 30, "concurrent (prepare + unprepare)": 3},
    "shapes": {"1": 10, "2+1a": 4},
    "not_explored": {"republish": "the profile declares no way to make the driver republish (referenceFaults)"},
    "exercised": ["explore.a", "explore.b"],
    "finding": {"obligation": "explore.pool-changes-only-with-a-new-generation"},
}


def test_a_run_without_the_explorer_says_it_did_not_run_and_prints_nothing(tmp_path: Path) -> None:
    space = explored_space(tmp_path)
    assert space == {"state": "not run"}
    assert exploration_markdown(space) == [] and exploration_terminal_line(space) == []


def test_the_summary_gives_the_explored_space_of_every_worker_with_seed_and_replay(tmp_path: Path) -> None:
    RunRecords(tmp_path, "gw0").add(RECORD_KIND, RECORD)
    RunRecords(tmp_path, "gw1").add(RECORD_KIND, RECORD | {"seed": 8, "finding": None})
    space = explored_space(tmp_path)
    json.dumps(space)  # it goes into summary.json as it is
    assert (space["examples"], space["steps"], space["shrink_steps"], space["verdicts"]) == (18, 160, 40, 3800), space
    assert space["operations"] == {"create claim": 60, "concurrent (prepare + unprepare)": 6}, space
    [line] = exploration_terminal_line(space)
    assert "18 sequences, 160 steps, shrinking 8 examples (40 steps), 2 operation kinds, 2 claim shapes" in line, line
    assert line.endswith("seed 7, 8"), line
    text = "\n".join(exploration_markdown(space))
    assert "- not explored: republish: the profile declares no way" in text, text
    assert "finding explore.pool-changes-only-with-a-new-generation; replay: `dra-conformance explore" in text, text
    assert "no finding" in text, text
