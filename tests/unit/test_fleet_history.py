"""The fleet's nightly history without a cluster: figures read from summaries, ingest, the regression rule, the SVG.

The SQLite backend runs here for real (the standard library's sqlite3 on a file in tmp_path); the PostgreSQL one
is tested against a real server in test_fleet_history_postgres.py.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.cli import main
from dra_conformance.report.fleet.command import DEFAULT_HISTORY, EXIT_OK, EXIT_REGRESSED
from dra_conformance.report.fleet.history import open_history, redacted
from dra_conformance.report.fleet.nights import Figures, Night, figures_of, night_of
from dra_conformance.report.fleet.runs import run_of
from dra_conformance.report.fleet.sources import FoundSummary
from dra_conformance.report.fleet.svg import plot, time_range, timeline
from dra_conformance.report.fleet.trend import (
    CANARY_WINDOW_NIGHTS,
    METRICS,
    Series,
    canary_window,
    clean_streak,
    first_over,
    regression,
    series_of,
)
from tests.unit.fleet_history_summaries import night
from tests.unit.fleet_summaries import write_run

SVG = "{http://www.w3.org/2000/svg}"
NEWEST = datetime(2026, 12, 5, 2, 30, tzinfo=UTC)
ALLOCATION = next(metric for metric in METRICS if metric.key == "allocation_p95")
READY = next(metric for metric in METRICS if metric.key == "ready_p95")

# The canary gate of a real run (reports of the real-node tier, 2026-12-05), as its summary.json holds it.
REAL_GATE: dict[str, Any] = {
    "state": "hold",
    "rules": [
        {
            "rule": "allocation p95",
            "figure": "DRA p95 0.028 s (142 pods of this run with claims the scheduler allocated)",
            "threshold": "<= 1.0 s (configured SLO: no canary measurement (the device-plugin rollback rehearsal "
            "measures both paths: none in this run or --dra-rollback-state))",
            "result": "pass",
        },
        {"rule": "pod-ready p95", "figure": "no data", "threshold": "<= 5.0 s (configured SLO)", "result": "no data"},
        {
            "rule": "errors against budget",
            "figure": "status-writer denials 0, status update errors 0 (of 198 status writes by "
            "system:serviceaccount:fake-dra:fake-dra); allocation timeouts 0",
            "threshold": "<= 0 in total (error budget)",
            "result": "pass",
        },
        {
            "rule": "kubelet-observed prepare p95",
            "figure": "kubelet p95 <= 0.1 s (n=25 on real-node-0, real-node-1; excluded: 6 faulted checks' windows); "
            "suite client-side p95 108.6 ms (n=77, fake nodes)",
            "threshold": "<= 2.0 s (configured SLO)",
            "result": "pass",
        },
    ],
    "policy": {"error_budget": 0},
}


def _night(document: dict[str, Any], run_id: str) -> Night:
    found = FoundSummary(f"/runs/{run_id}/summary.json", run_id, document, 0.0)
    return night_of(found, run_of(found))


def _nights(*documents: dict[str, Any]) -> list[Night]:
    return [_night(document, f"run-{index:02d}") for index, document in enumerate(documents)]


def _days(count: int, cluster: str = "staging-a", **figures: Any) -> list[dict[str, Any]]:
    return [night(cluster=cluster, finished_at=NEWEST - timedelta(days=count - 1 - n), **figures) for n in range(count)]


def test_figures_are_read_from_a_real_runs_gate_and_absent_ones_stay_none() -> None:
    document = {
        "canary_gate": REAL_GATE,
        "metrics_verdict": {"evidence": {"lag_p95": 3.164409, "slo": 60.0}},
        "flake_record": {"state": "one run", "why": "pass rates per test come from `dra-conformance run --repeat N`"},
    }
    figures = figures_of(document)
    expected = Figures(
        allocation_p95=0.028,
        allocation_limit=1.0,
        ready_limit=5.0,
        prepare_p95=0.1,  # "<= 0.1 s": every call in the lowest bucket; the bound is the figure
        prepare_limit=2.0,
        errors_used=0.0,
        error_budget=0.0,
        freshness_p95=3.164409,
        freshness_slo=60.0,
    )
    assert figures == expected, figures
    assert figures_of({}) == Figures(), figures_of({})


def test_baseline_and_its_limit_come_from_the_threshold_and_flake_rate_from_a_repeat_record() -> None:
    figures = figures_of(night(cluster="a", finished_at=NEWEST, allocation=0.2, allocation_baseline=0.12, flaky=2))
    observed = (figures.allocation_p95, figures.allocation_baseline, figures.allocation_limit, figures.flake_rate)
    assert observed == (0.2, 0.12, 0.37, 0.01), observed


def test_a_run_ingested_twice_counts_once_and_reads_back_equal(tmp_path: Path) -> None:
    nights = _nights(*_days(3), night(cluster="other", finished_at=NEWEST, ready=None, freshness=None))
    # The same run id on another cluster is another run.
    nights.append(replace(nights[0], cluster="prod-b"))
    history = open_history(str(tmp_path / "h" / DEFAULT_HISTORY))
    try:
        first, second = history.ingest(nights), history.ingest(nights)
        stored = history.nights()
    finally:
        history.close()
    assert (first, second) == (5, 0), (first, second)
    by_key = {(n.run_id, n.cluster): n for n in stored}
    assert len(stored) == 5 and by_key == {(n.run_id, n.cluster): n for n in nights}, stored
    gap = by_key[("run-03", "other")].figures
    assert (gap.ready_p95, gap.freshness_p95) == (None, None), gap


def test_since_keeps_the_recent_nights_only(tmp_path: Path) -> None:
    history = open_history(str(tmp_path / DEFAULT_HISTORY))
    try:
        history.ingest(_nights(*_days(20)))
        recent = history.nights(NEWEST - timedelta(days=13, hours=1))
    finally:
        history.close()
    days = [n.finished_at.date().isoformat() for n in recent]
    assert len(recent) == 14 and days[0] == "2026-11-22" and days[-1] == "2026-12-05", days


def _series(*documents: dict[str, Any]) -> Series:
    (found,) = series_of(_nights(*documents))
    return found


def test_regression_rule() -> None:
    before, now = NEWEST - timedelta(days=1), NEWEST
    cases: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
        ("steady", {}, {}, ()),
        ("verdict worse", {}, {"verdict": "incomplete"}, ("verdict certified -> incomplete",)),
        ("verdict better", {"verdict": "not certified"}, {}, ()),
        ("newly over", {}, {"allocation": 0.5}, ("allocation p95 0.5 s over its threshold 0.37 s",)),
        ("over both nights", {"allocation": 0.5}, {"allocation": 0.6}, ()),
        ("gap, then over", {"ready": None}, {"ready": 1.6}, ("pod-ready p95 1.6 s over its threshold 1.5 s",)),
        ("over, then a gap", {"ready": 1.6}, {"ready": None}, ()),
        ("errors", {}, {"errors": 1}, ("error budget used 1 over its threshold 0",)),
    ]
    for name, old, new, expected in cases:
        found = regression(
            _series(night(cluster="a", finished_at=before, **old), night(cluster="a", finished_at=now, **new))
        )
        reasons = found.reasons if found is not None else ()
        assert reasons == expected, (name, reasons)
    assert regression(_series(night(cluster="a", finished_at=now, verdict="not certified"))) is None


def test_first_night_over_is_marked_once_per_excursion_and_gaps_are_not_over() -> None:
    values = [0.2, 0.5, 0.6, 0.2, None, 0.5, 0.5]
    documents = [
        night(cluster="a", finished_at=NEWEST - timedelta(days=len(values) - 1 - n), allocation=v)
        for n, v in enumerate(values)
    ]
    marks = first_over(ALLOCATION, _series(*documents).nights)
    assert marks == [1, 5], marks


def test_canary_window_needs_fourteen_clean_nights_in_a_row() -> None:
    clean = _series(*_days(CANARY_WINDOW_NIGHTS))
    assert clean_streak(clean.nights) == CANARY_WINDOW_NIGHTS, clean_streak(clean.nights)
    assert canary_window(clean.nights) == "14 clean nights in a row: the range may widen", canary_window(clean.nights)
    documents = _days(CANARY_WINDOW_NIGHTS)
    documents[3] = night(cluster="staging-a", finished_at=NEWEST - timedelta(days=10), gate="hold")
    broken = _series(*documents)
    text = canary_window(broken.nights)
    assert text == "10 of 14 clean nights in a row: range not widened until 14 clean nights", text


def _parse(svg_text: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg_text)


def _of_class(root: ElementTree.Element, css: str) -> list[ElementTree.Element]:
    return [element for element in root.iter() if css in (element.get("class") or "").split()]


def test_svg_draws_gaps_not_zeros_marks_the_night_over_and_shades_the_canary_window() -> None:
    values = [0.2, 0.21, None, 0.22, 0.5, 0.2]
    documents = [
        night(cluster="a", finished_at=NEWEST - timedelta(days=len(values) - 1 - n), allocation=v)
        for n, v in enumerate(values)
    ]
    nights = _series(*documents).nights
    start, end = time_range(nights)
    root = _parse(plot(ALLOCATION, nights, start, end))
    series = _of_class(root, "series")
    observed = {
        "series points": [len((line.get("points") or "").split()) for line in series],
        "points": len(_of_class(root, "point")),
        "over": len(_of_class(root, "over")),
        "gaps": len(_of_class(root, "gap")),
        "first-over": len(_of_class(root, "first-over")),
        "canary-window": len(_of_class(root, "canary-window")),
        "thresholds": len(_of_class(root, "threshold")),
        "baselines": len(_of_class(root, "baseline")),
    }
    expected = {
        "series points": [2, 3],  # broken at the night without the figure, never drawn down to zero
        "points": 5,
        "over": 1,
        "gaps": 1,
        "first-over": 1,
        "canary-window": 1,
        "thresholds": 1,
        "baselines": 1,
    }
    assert observed == expected, observed
    (mark,) = _of_class(root, "first-over")
    label = "".join(mark.itertext())
    assert label == "left threshold 12-04", label


def test_timeline_has_one_cell_per_night_and_rings_a_regressed_newest() -> None:
    documents = [*_days(3), night(cluster="staging-a", finished_at=NEWEST + timedelta(hours=1), verdict="x<y")]
    nights = _series(*documents).nights
    start, end = time_range(nights)
    root = _parse(timeline(nights, start, end, regressed=True))
    cells = _of_class(root, "verdict")
    classes = [cell.get("class") for cell in cells]
    assert classes == ["verdict passing"] * 3 + ["verdict incomplete"], classes
    assert [cell.get("stroke") for cell in cells] == [None, None, None, "#000"], [c.get("stroke") for c in cells]
    assert "x<y" in "".join(cells[-1].itertext()), "".join(cells[-1].itertext())


def test_password_never_shown() -> None:
    assert redacted("postgresql://ci:s3cret@db:5432/fleet") == "postgresql://ci:***@db:5432/fleet"
    assert redacted("postgresql://db/fleet") == "postgresql://db/fleet"


def _cli(tmp_path: Path, *extra: str) -> list[str]:
    return ["report", "--fleet", str(tmp_path / "in"), "--reports-dir", str(tmp_path / "reports"), *extra]


def _write_nights(root: Path, documents: list[dict[str, Any]]) -> None:
    for index, document in enumerate(documents):
        write_run(root, f"20261201-0000{index:02d}-{index:04x}", document)


def test_cli_keeps_the_default_history_and_exits_regressed_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    documents = [night(cluster="a", finished_at=now - timedelta(days=2 - n)) for n in range(3)]
    documents[-1] = night(cluster="a", finished_at=now, verdict="not certified", allocation=0.9)
    _write_nights(tmp_path / "in", documents)
    code = main(_cli(tmp_path, "--output", str(tmp_path / "out"), "--since", "14d"))
    captured = capsys.readouterr()
    regressed = [line for line in captured.err.splitlines() if line.startswith("regressed: ")]
    assert code == EXIT_REGRESSED, (code, captured.err)
    assert len(regressed) == 1, captured.err
    assert "verdict certified -> not certified; allocation p95 0.9 s over its threshold 0.37 s" in regressed[0]
    assert (tmp_path / "reports" / DEFAULT_HISTORY).is_file(), sorted((tmp_path / "reports").iterdir())
    page = (tmp_path / "out" / "fleet.html").read_text()
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="plot"') == len(METRICS), page.count("<svg")
    assert "<script" not in page and "Newest night regressed" in page
    # The same runs again: nothing new is stored, and the verdict is the same.
    assert main(_cli(tmp_path)) == EXIT_REGRESSED
    assert "0 new run(s) stored, 3 night(s) shown" in capsys.readouterr().err


def test_cli_exits_ok_without_a_regression_and_stale_series_are_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    # Cluster b regressed long ago and has not run since: the fleet table shows it stale; it pages nobody.
    documents = [night(cluster="a", finished_at=now - timedelta(days=1 - n)) for n in range(2)]
    documents += [
        night(cluster="b", finished_at=now - timedelta(days=6)),
        night(cluster="b", finished_at=now - timedelta(days=5), verdict="not certified"),
    ]
    _write_nights(tmp_path / "in", documents)
    code = main(_cli(tmp_path, "--history", str(tmp_path / "own.sqlite3")))
    captured = capsys.readouterr()
    assert code == EXIT_OK, (code, captured.err)
    assert "regressed" not in captured.err, captured.err
    assert "4 new run(s) stored" in captured.err, captured.err
    assert not (tmp_path / "reports" / DEFAULT_HISTORY).exists(), "--history names the file; the default stays unused"


def test_history_in_json_is_not_required_for_fleet_json(tmp_path: Path) -> None:
    _write_nights(tmp_path / "in", [night(cluster="a", finished_at=datetime.now(UTC))])
    assert main(_cli(tmp_path, "--output", str(tmp_path / "out"))) == EXIT_OK
    document = json.loads((tmp_path / "out" / "fleet.json").read_text())
    assert [c["cluster"] for c in document["clusters"]] == ["a"], document["clusters"]
