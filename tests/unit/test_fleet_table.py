"""The fleet table: latest run per cluster, staleness, disagreements first, and its three renderings."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.cli import EXIT_OK, main
from dra_conformance.report.fleet.document import fleet_document
from dra_conformance.report.fleet.durations import describe_duration, parse_duration, spell_duration
from dra_conformance.report.fleet.identity import cluster_name
from dra_conformance.report.fleet.markdown import render_markdown
from dra_conformance.report.fleet.merge import DEFAULT_STALE_AFTER, Fleet, build_fleet
from dra_conformance.report.fleet.page import render_page
from dra_conformance.report.fleet.runs import run_of
from dra_conformance.report.fleet.sources import FoundSummary
from tests.unit.fleet_summaries import summary, write_run

NOW = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)


def _fleet(*documents: dict[str, Any], stale_after: timedelta = DEFAULT_STALE_AFTER) -> Fleet:
    runs = [run_of(FoundSummary(f"run-{i}/summary.json", f"run-{i}", d, 0)) for i, d in enumerate(documents)]
    return build_fleet(runs, NOW, stale_after)


def _ago(hours: float) -> str:
    return (NOW - timedelta(hours=hours)).isoformat()


def test_only_each_clusters_latest_run_is_in_the_table_and_its_older_runs_are_counted() -> None:
    fleet = _fleet(
        summary(cluster="a", verdict="not certified", finished_at=_ago(30)),
        summary(cluster="a", verdict="certified", finished_at=_ago(2)),
        summary(cluster="a", verdict="incomplete", finished_at=_ago(26)),
        summary(cluster="b", verdict="certified", finished_at=_ago(1)),
    )
    rows = {row.run.cluster: row for row in fleet.rows}
    assert sorted(rows) == ["a", "b"] and fleet.runs_read == 4
    assert (rows["a"].verdict, rows["a"].older_runs) == ("certified", 2), rows["a"]
    assert "(2 h ago; 2 older runs)" in render_markdown(fleet)


def test_a_stale_result_is_never_shown_as_passing() -> None:
    fleet = _fleet(
        summary(cluster="old", verdict="certified", finished_at=_ago(72)),
        summary(cluster="fresh", verdict="certified", finished_at=_ago(35)),
    )
    rows = {row.run.cluster: row for row in fleet.rows}
    assert rows["old"].stale and not rows["fresh"].stale
    assert rows["old"].verdict == "stale (was certified, 3 d ago)", rows["old"].verdict
    markdown = render_markdown(fleet)
    old_row = next(line for line in markdown.splitlines() if line.startswith("| old "))
    assert "| stale (was certified, 3 d ago) |" in old_row, old_row
    assert "| certified |" not in old_row, old_row
    assert 'class="verdict-stale"' in render_page(fleet)
    document = {c["cluster"]: c for c in fleet_document(fleet)["clusters"]}
    assert (document["old"]["stale"], document["old"]["verdict"]) == (True, "certified"), document["old"]
    assert document["old"]["shown_verdict"] == "stale (was certified, 3 d ago)"
    shorter = _fleet(
        summary(cluster="fresh", verdict="certified", finished_at=_ago(35)), stale_after=timedelta(hours=24)
    )
    assert shorter.rows[0].verdict == "stale (was certified, 1 d 11 h ago)", shorter.rows[0].verdict


def test_clusters_that_disagree_on_one_driver_version_come_first_with_a_line_saying_so() -> None:
    fleet = _fleet(
        summary(cluster="a-same", verdict="certified", driver="x.example.com", version="1.0"),
        summary(cluster="b-good", verdict="certified", version="2.0.0"),
        summary(cluster="c-unversioned", verdict="not certified", version=None),
        summary(cluster="d-unversioned", verdict="certified", version=None),
        summary(cluster="z-bad", verdict="not certified", version="2.0.0", failed=("t.py::x (status.y)",)),
        summary(cluster="y-stale", verdict="certified", version="2.0.0", finished_at=_ago(50)),
    )
    order = [row.run.cluster for row in fleet.rows]
    assert order == ["b-good", "y-stale", "z-bad", "a-same", "c-unversioned", "d-unversioned"], order
    assert [(d.driver, d.version) for d in fleet.disagreements] == [("gpu.example.com", "2.0.0")]
    markdown = render_markdown(fleet)
    assert (
        "**Verdicts disagree on the same driver version across clusters; those clusters are listed first:**" in markdown
    )
    assert (
        "- gpu.example.com 2.0.0: certified on b-good; stale (was certified, 2 d 2 h ago) on y-stale; "
        "not certified on z-bad" in markdown
    ), markdown
    assert "| status.y |" in markdown
    assert [c["disagrees"] for c in fleet_document(fleet)["clusters"]] == [True, True, True, False, False, False]


def test_no_disagreement_no_line() -> None:
    markdown = render_markdown(_fleet(summary(cluster="a"), summary(cluster="b", driver="other", verdict="incomplete")))
    assert "disagree" not in markdown, markdown


def test_read_exposure_is_not_checked_when_absent_and_names_subjects_outside_the_allowlist() -> None:
    outside = ["ClusterRoleBinding/-/wide", "RoleBinding/team/x", "ServiceAccount/ns/y", "User/-/alice"]
    fleet = _fleet(
        summary(cluster="a"),
        summary(cluster="b", read_exposure={"state": "outside allowlist", "outside_allowlist": outside}),
        summary(cluster="c", read_exposure={"state": "within allowlist", "outside_allowlist": []}),
    )
    cells = {row.run.cluster: row for row in fleet.rows}
    markdown = render_markdown(fleet)
    assert "| not checked |" in next(line for line in markdown.splitlines() if line.startswith("| a "))
    assert (
        "outside allowlist: 4 outside the allowlist (ClusterRoleBinding/-/wide, RoleBinding/team/x, "
        "ServiceAccount/ns/y, +1 more)" in markdown
    ), markdown
    assert "| within allowlist |" in markdown
    document = {c["cluster"]: c for c in fleet_document(fleet)["clusters"]}
    assert document["a"]["read_exposure"] is None
    assert document["b"]["read_exposure"]["outside_allowlist"] == outside
    assert cells["c"].run.read_exposure is not None


def test_every_text_is_escaped_in_markdown_and_html() -> None:
    hostile = "<script>alert(1)</script>|x"
    fleet = _fleet(summary(cluster=hostile, verdict="certified", failed=("t.py::x (a|b)",)))
    page = render_page(fleet)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;|x" in page, page
    markdown = render_markdown(fleet)
    row = next(line for line in markdown.splitlines() if "alert" in line)
    assert row.startswith("| &lt;script&gt;alert(1)&lt;/script&gt;\\|x |"), row
    assert row.count(" | ") == 10, row  # eleven cells: no pipe in a value splits one


def test_report_fleet_prints_markdown_and_writes_three_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path / "in", "20261201-210036-e61b", summary(cluster="a", finished_at=datetime.now(UTC).isoformat()))
    # --reports-dir: the history's default file goes there, not into the checkout's reports/.
    fleet = ["report", "--fleet", str(tmp_path / "in"), "--reports-dir", str(tmp_path / "reports")]
    code = main([*fleet, "--output", str(tmp_path / "out"), "--stale-after", "2d"])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    assert captured.out.startswith("# Fleet report\n"), captured.out
    assert "older than 2d is stale" in captured.out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fleet.html", "fleet.json", "fleet.md"]
    assert (tmp_path / "out" / "fleet.md").read_text() == captured.out
    assert json.loads((tmp_path / "out" / "fleet.json").read_text())["clusters"][0]["verdict"] == "certified"
    assert "wrote " in captured.err


def test_durations_parse_as_written_and_read_back() -> None:
    assert parse_duration("36h") == timedelta(hours=36)
    assert parse_duration("1d12h") == timedelta(hours=36)
    assert parse_duration("90m") == timedelta(minutes=90)
    for bad in ("", "36", "h", "0h", "1.5h", "3x", "-1h", "36h 2"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)
    assert spell_duration(timedelta(hours=36)) == "36h" and spell_duration(timedelta(days=2)) == "2d"
    assert describe_duration(timedelta(hours=72)) == "3 d" and describe_duration(timedelta(hours=71)) == "2 d 23 h"
    assert describe_duration(timedelta(minutes=64)) == "1 h" and describe_duration(timedelta(minutes=4)) == "4 min"


def test_the_cluster_is_named_by_the_option_the_context_or_the_local_state_dir(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: prod-eu-1\n")
    assert cluster_name("nightly-7", "existing", "https://x", kubeconfig) == "nightly-7"
    assert cluster_name(None, "existing", "https://x", kubeconfig) == "prod-eu-1"
    assert cluster_name(None, "existing", "https://x", kubeconfig, context="staging") == "staging"
    assert cluster_name(None, "existing", "https://x", tmp_path / "absent") == "https://x"
    details = {"state_dir": "/work/reports/clusters/local"}
    assert cluster_name(None, "local", "https://127.0.0.1:1", None, None, details) == "local/local"
    assert cluster_name(None, "kind", "https://127.0.0.1:1", None, None, {"cluster": "dra"}) == "kind/dra"
