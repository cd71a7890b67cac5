"""The rehearsal state file round-trips, refuses what it cannot read, and the report names the failed phase."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.errors import UsageError
from dra_conformance.rollback.report import render_markdown, summarize
from dra_conformance.rollback.state import Phase, PhaseRecord, RehearsalState


def test_state_round_trips_through_its_file(tmp_path: Path) -> None:
    state = RehearsalState(tmp_path / "s.json")
    state.records[Phase.BEFORE] = PhaseRecord(Phase.BEFORE, "t0", 1.5, {"setup": {"namespace": "ns"}})
    state.save()
    loaded = RehearsalState.load(tmp_path / "s.json")
    assert loaded.records[Phase.BEFORE].facts["setup"]["namespace"] == "ns"
    assert loaded.require(Phase.AFTER_CHANGE, Phase.BEFORE).seconds == 1.5


def test_a_later_phase_without_its_predecessor_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs phase before"):
        RehearsalState(tmp_path / "s.json").require(Phase.AFTER_CHANGE, Phase.BEFORE)


def test_a_file_that_is_not_a_state_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"something": "else"}')
    with pytest.raises(UsageError, match="not a rehearsal state"):
        RehearsalState.load(path)


def test_the_report_names_the_first_failed_phase_and_what_was_left(tmp_path: Path) -> None:
    state = RehearsalState(tmp_path / "s.json")
    state.records[Phase.BEFORE] = PhaseRecord(Phase.BEFORE, "t0", 0.1)
    state.records[Phase.AFTER_ROLLBACK] = PhaseRecord(Phase.AFTER_ROLLBACK, "t2", 2.0, left_behind=["claim c1"])
    summary = summarize(state)
    assert summary["failed_phase"] == "after_rollback" and summary["rollback_seconds"] == 2.0
    assert [p["outcome"] for p in summary["phases"]] == ["passed", "not run", "failed"]
    assert "- claim c1" in render_markdown(summary)
