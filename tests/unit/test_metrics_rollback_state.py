"""The metrics rehearsal keeps its own part of the shared state file, and the rollback report covers both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_conformance.errors import UsageError
from dra_conformance.rollback.metrics_rehearsal import REHEARSAL
from dra_conformance.rollback.report import render_markdown, summarize
from dra_conformance.rollback.state import Phase, PhaseRecord, RehearsalState


def _all_phases(state: RehearsalState, *, left: list[str] | None = None) -> None:
    for index, phase in enumerate(Phase):
        state.records[phase] = PhaseRecord(phase, f"t{index}", float(index + 1))
    state.records[Phase.AFTER_ROLLBACK].left_behind = left or []
    state.save()


def test_each_rehearsal_saves_only_its_part_of_one_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    device_plugin = RehearsalState.load(path)
    metrics = RehearsalState.load(path, REHEARSAL)
    device_plugin.records[Phase.BEFORE] = PhaseRecord(Phase.BEFORE, "t0", facts={"setup": {"namespace": "a"}})
    device_plugin.save()
    metrics.records[Phase.BEFORE] = PhaseRecord(Phase.BEFORE, "t0", facts={"setup": {"namespace": "m"}})
    metrics.save()  # loaded before the other saved: must not drop its record
    body = json.loads(path.read_text())
    assert body["phases"]["before"]["facts"]["setup"]["namespace"] == "a", body
    assert body["rehearsals"][REHEARSAL]["phases"]["before"]["facts"]["setup"]["namespace"] == "m", body
    again = RehearsalState.load(path, REHEARSAL)
    assert again.require(Phase.AFTER_CHANGE, Phase.BEFORE).facts["setup"]["namespace"] == "m"
    assert list(again.others) == ["device-plugin-dra"], again.others


def test_a_later_phase_needs_its_predecessor_in_some_rehearsal_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    metrics = RehearsalState.load(path, REHEARSAL)
    with pytest.raises(UsageError, match="needs phase before"):
        RehearsalState.load(path).require_any(Phase.AFTER_CHANGE, Phase.BEFORE)
    metrics.records[Phase.BEFORE] = PhaseRecord(Phase.BEFORE, "t0")
    metrics.save()
    RehearsalState.load(path).require_any(Phase.AFTER_CHANGE, Phase.BEFORE)  # the metrics rehearsal recorded it
    with pytest.raises(UsageError, match=r"needs phase before .*recorded: none"):
        RehearsalState.load(path).require(Phase.AFTER_CHANGE, Phase.BEFORE)  # but not the device-plugin one


def test_the_report_judges_every_rehearsal_that_ran_and_names_the_failed_one(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    _all_phases(RehearsalState.load(path))
    metrics = RehearsalState.load(path, REHEARSAL)
    _all_phases(metrics, left=["APIService v1alpha1.metrics.k8s.io (True/Passed) lingers after the rollback"])
    summary = summarize(metrics)
    assert summary["verdict"] == "not rolled back cleanly", summary
    assert summary["failed_phase"] == f"{REHEARSAL}: after_rollback", summary
    assert summary["rollback_seconds"] == 6.0, summary  # 3 s per rehearsal's after_rollback
    assert [p["outcome"] for p in summary["phases"]] == ["passed"] * 3, summary  # top level: device plugin <-> DRA
    assert summary["rehearsals"]["device-plugin-dra"]["verdict"] == "rolled back cleanly", summary
    markdown = render_markdown(summary)
    assert f"## {REHEARSAL}: not rolled back cleanly" in markdown, markdown
    assert "- APIService v1alpha1.metrics.k8s.io (True/Passed) lingers after the rollback" in markdown, markdown


def test_a_metrics_rehearsal_alone_is_judged_on_its_own(tmp_path: Path) -> None:
    metrics = RehearsalState.load(tmp_path / "state.json", REHEARSAL)
    _all_phases(metrics)
    summary = summarize(metrics)
    assert summary["verdict"] == "rolled back cleanly" and summary["failed_phase"] is None, summary
    assert list(summary["rehearsals"]) == [REHEARSAL], summary
