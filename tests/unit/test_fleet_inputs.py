"""The fleet report's inputs: run directories, directories of runs, tarballs, old summaries, and bad input."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from dra_conformance.canary.inputs import Inputs
from dra_conformance.canary.rules import Policy, evaluate
from dra_conformance.cli import EXIT_USAGE, main
from dra_conformance.report.certification import render_markdown, summarize, write_summary
from dra_conformance.report.fleet.document import fleet_document
from dra_conformance.report.fleet.markdown import render_markdown as render_fleet_markdown
from dra_conformance.report.fleet.merge import DEFAULT_STALE_AFTER, build_fleet
from dra_conformance.report.fleet.runs import NO_OBLIGATION, Rehearsal, TimeSource, run_of
from dra_conformance.report.fleet.sources import FleetInputError, FoundSummary, escapes, read_inputs
from dra_conformance.verdict import CheckResult, Outcome, RunFacts
from tests.unit.fleet_summaries import summary, tar_bytes, write_run


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {text!r}"
    assert "Traceback" not in text, text
    return lines[0]


def _found(document: dict[str, object], run_dir: str = "20261201-210036-e61b", mtime: float = 0.0) -> FoundSummary:
    return FoundSummary(f"{run_dir}/summary.json", run_dir, dict(document), mtime)


def test_a_directory_of_runs_yields_every_run_and_never_allures_own_summary(tmp_path: Path) -> None:
    write_run(tmp_path, "20261201-210036-e61b", summary(cluster="a"))
    write_run(tmp_path / "repeat-1" / "run-001", "20261201-220000-0001", summary(cluster="b"))
    found = read_inputs([tmp_path])
    clusters = sorted(s.document["run"]["cluster"] for s in found.summaries)
    assert clusters == ["a", "b"], [s.source for s in found.summaries]
    assert found.skipped == [], found.skipped
    assert {s.run_dir for s in found.summaries} == {"20261201-210036-e61b", "20261201-220000-0001"}


def test_an_input_named_twice_counts_its_runs_once(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "20261201-210036-e61b", summary())
    found = read_inputs([tmp_path, run_dir, run_dir / "summary.json"])
    assert len(found.summaries) == 1, [s.source for s in found.summaries]


def test_a_sonobuoy_tarball_is_read_in_memory_nested_tarballs_included(tmp_path: Path) -> None:
    inner = tar_bytes({"reports/20261201-230000-beef/summary.json": json.dumps(summary(cluster="inner")).encode()})
    outer = tar_bytes(
        {
            "plugins/dra-conformance/results/global/reports/20261201-220000-abcd/summary.json": json.dumps(
                summary(cluster="outer")
            ).encode(),
            "plugins/dra-conformance/results/global/allure-report/summary.json": b'{"stats": {}}',
            "plugins/dra-conformance/results/global/results.tar.gz": inner,
        }
    )
    tarball = tmp_path / "202612012200_sonobuoy_x.tar.gz"
    tarball.write_bytes(outer)
    before = sorted(p.name for p in tmp_path.iterdir())
    found = read_inputs([tarball])
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "the tarball was extracted to disk"
    by_cluster = {s.document["run"]["cluster"]: s for s in found.summaries}
    assert sorted(by_cluster) == ["inner", "outer"], [s.source for s in found.summaries]
    assert by_cluster["outer"].run_dir == "20261201-220000-abcd"
    assert by_cluster["inner"].source.endswith("results.tar.gz:reports/20261201-230000-beef/summary.json")
    assert by_cluster["outer"].mtime == 1_764_626_400


@pytest.mark.parametrize(
    ("members", "links", "expected"),
    [
        ({"../../etc/summary.json": b"{}"}, {}, "member '../../etc/summary.json' escapes the archive"),
        ({"/abs/summary.json": b"{}"}, {}, "member '/abs/summary.json' escapes the archive"),
        ({"a/ok.txt": b"x"}, {"a/summary.json": "../../../etc/passwd"}, "member 'a/summary.json' escapes the archive"),
        ({"a/ok.txt": b"x"}, {"a/summary.json": "ok.txt"}, "member 'a/summary.json' is not a regular file; refused"),
    ],
)
def test_a_tarball_with_a_member_escaping_it_or_a_linked_summary_is_refused(
    tmp_path: Path, members: dict[str, bytes], links: dict[str, str], expected: str
) -> None:
    tarball = tmp_path / "evil.tar"
    tarball.write_bytes(tar_bytes(members, links, gzip=False))
    with pytest.raises(FleetInputError) as raised:
        read_inputs([tarball])
    assert expected in str(raised.value), str(raised.value)


def test_escapes_tracks_dot_dot_through_the_whole_name() -> None:
    assert not escapes("a/../b/summary.json")
    assert not escapes("./reports/x/summary.json")
    assert escapes("a/../../b")
    assert escapes("../x", within=PurePosixPath("."))
    assert not escapes("../x", within=PurePosixPath("a/b"))


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: d / "absent", "fleet input {d}/absent: no such file or directory"),
        (
            lambda d: _write(d / "r.tar.gz", tar_bytes({"x/other.json": b"{}"})),
            "fleet input {d}/r.tar.gz: the tarball holds no summary.json of dra-conformance",
        ),
        (
            lambda d: _write(d / "run" / "summary.json", b'{"verdict": '),
            "fleet input {d}/run/summary.json: not valid JSON: Expecting value: line 1 column 13 (char 12)",
        ),
        (
            lambda d: _write(d / "run" / "summary.json", b'{"stats": {}}'),
            "fleet input {d}/run/summary.json: not a dra-conformance summary (no verdict or run)",
        ),
        (lambda d: _write(d / "bad.tgz", b"not a tarball"), "fleet input {d}/bad.tgz: "),
        (lambda d: _write(d / "notes.txt", b"x"), "fleet input {d}/notes.txt: not a run directory"),
        (lambda d: _mkdir(d / "empty"), "fleet input {d}/empty: no summary.json in it, below it or in a tarball"),
        (
            lambda d: _write(d / "r" / "summary.json", json.dumps(summary(finished_at="yesterday")).encode()),
            "fleet input {d}/r/summary.json: run.finished_at 'yesterday' is not an ISO 8601 time",
        ),
    ],
)
def test_bad_fleet_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, expected: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    code = main(["report", "--fleet", str(path)])
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert code == EXIT_USAGE, (code, line)
    assert line.startswith("dra-conformance: " + expected.format(d=tmp_path)), line
    assert captured.out == "", captured.out


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def test_report_needs_a_run_or_fleet_and_not_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report"]) == EXIT_USAGE
    assert "report needs RUN" in _one_line(capsys.readouterr().err)
    assert main(["report", "x", "--fleet", str(tmp_path)]) == EXIT_USAGE
    assert "leave out RUN and --serve" in _one_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as exited:
        main(["report", "--fleet", str(tmp_path), "--stale-after", "soon"])
    assert exited.value.code == EXIT_USAGE
    assert "expected a duration such as 36h" in _one_line(capsys.readouterr().err)


def test_an_old_summary_is_named_after_its_run_dir_and_dated_by_the_earliest_evidence() -> None:
    old = summary(cluster=None, finished_at=None)
    copied_now = datetime(2026, 12, 2, 6, 0, tzinfo=UTC).timestamp()  # a copy without kept times looks new
    run = run_of(_found(old, "20261201-210036-e61b", mtime=copied_now))
    assert (run.cluster, run.cluster_named) == ("20261201-210036-e61b", False)
    assert run.finished_at == datetime(2026, 12, 1, 21, 0, 36, tzinfo=UTC), run.finished_at
    assert run.time_source == TimeSource.RUN_ID
    written = datetime(2026, 12, 1, 21, 1, 34, tzinfo=UTC).timestamp()
    by_mtime = run_of(_found(old, "my-copy", mtime=written))
    assert (by_mtime.finished_at.timestamp(), by_mtime.time_source) == (written, TimeSource.FILE_TIME)


def test_a_new_summary_names_its_cluster_and_end_time() -> None:
    run = run_of(_found(summary(cluster="prod-a", finished_at="2026-12-01T22:00:00+00:00"), mtime=0))
    assert (run.cluster, run.cluster_named, run.time_source) == ("prod-a", True, TimeSource.SUMMARY)
    assert run.finished_at == datetime(2026, 12, 1, 22, tzinfo=UTC)


def test_failed_obligations_are_counted_from_failed_checks_and_an_unexpected_driver_exit() -> None:
    document = summary(
        verdict="not certified",
        failed=(
            "suites/status/test_s.py::test_a[x] (status.declared-status-written)",
            "suites/status/test_s.py::test_b (status.declared-status-written)",
            "suites/protocol/test_p.py::test_c (cluster fault)",
            "suites/protocol/test_p.py::test_d[param (x)]",
        ),
    )
    document["driver_exits"] = {"unexpected": [{"describe": "kwok-node-0: exit code 2"}], "caused_by_checks": []}
    failed = run_of(_found(document)).failed_obligations
    assert failed == {
        "status.declared-status-written": 2,
        "cluster fault": 1,
        NO_OBLIGATION: 1,
        "run.driver-stays-up": 1,
    }, failed


def test_each_rollback_comes_from_its_own_section_the_device_plugin_one_else_from_the_canary_gate_figure() -> None:
    document = summary()
    document["metrics_api_rollback"] = {"verdict": "not rolled back cleanly", "rehearsed_at": "2026-11-30T21:01:10Z"}
    document["device_plugin_rollback"] = {"verdict": "rolled back cleanly", "rehearsed_at": "2026-11-30T21:00:53Z"}
    run = run_of(_found(document))
    assert (run.metrics_api_rollback.at, run.metrics_api_rollback.verdict) == (
        datetime(2026, 11, 30, 21, 1, 10, tzinfo=UTC),
        "not rolled back cleanly",
    )
    assert (run.device_plugin_rollback.at, run.device_plugin_rollback.verdict) == (
        datetime(2026, 11, 30, 21, 0, 53, tzinfo=UTC),
        "rolled back cleanly",
    )
    judged = summary()  # the gate judged a rehearsal of an earlier run (--dra-rollback-state)
    judged["canary_gate"]["rules"] = [
        {
            "rule": "device-plugin rollback rehearsed",
            "figure": "yes, 2026-11-29T21:00:51+00:00 to 2026-11-29T21:00:53+00:00: not rolled back cleanly",
            "result": "hold",
        }
    ]
    from_gate = run_of(_found(judged))
    assert (from_gate.device_plugin_rollback.at, from_gate.device_plugin_rollback.verdict) == (
        datetime(2026, 11, 29, 21, 0, 53, tzinfo=UTC),
        "not rolled back cleanly",
    )
    assert from_gate.metrics_api_rollback == Rehearsal(None, "not rehearsed"), from_gate
    plain = run_of(_found(summary()))
    assert plain.metrics_api_rollback == plain.device_plugin_rollback == Rehearsal(None, "not rehearsed"), plain


def _older(verdict: str, rehearsed_at: str | None, rule: tuple[str, str] | None) -> dict[str, Any]:
    """A summary of a version that held both rollbacks under `rollback_rehearsal`; rule 4 under its old name."""
    document = summary()
    del document["metrics_api_rollback"], document["device_plugin_rollback"]
    document["rollback_rehearsal"] = {"verdict": verdict, "failed_phase": None, "rehearsed_at": rehearsed_at}
    if rule is not None:
        document["canary_gate"] = {"state": rule[1], "rules": [{"rule": "rollback rehearsed", "figure": rule[0]}]}
    return document


def test_older_summaries_with_one_verdict_over_both_rollbacks_are_told_apart_where_they_can_be() -> None:
    # The report the fleet contradicted itself on: the metrics API rollback alone ran, the gate held on the other.
    metrics_alone = run_of(_found(_older("rolled back cleanly", None, ("no (phases recorded: none)", "hold"))))
    assert metrics_alone.metrics_api_rollback == Rehearsal(None, "rolled back cleanly"), metrics_alone
    assert metrics_alone.device_plugin_rollback == Rehearsal(None, "not rehearsed"), metrics_alone
    figure = "yes, 2026-11-29T21:00:51+00:00 to 2026-11-29T21:00:53+00:00: rolled back cleanly"
    both = run_of(_found(_older("not rolled back cleanly", "2026-11-29T21:00:53+00:00", (figure, "pass"))))
    at = datetime(2026, 11, 29, 21, 0, 53, tzinfo=UTC)
    assert both.device_plugin_rollback == Rehearsal(at, "rolled back cleanly"), both
    assert both.metrics_api_rollback == Rehearsal(
        None, "not told apart (older summary; with the device-plugin rollback: not rolled back cleanly)"
    ), both
    unfinished = _older("not rolled back cleanly", "2026-11-29T21:00:51Z", ("no (phases recorded: before)", "hold"))
    assert run_of(_found(unfinished)).device_plugin_rollback == Rehearsal(
        datetime(2026, 11, 29, 21, 0, 51, tzinfo=UTC), "not rolled back cleanly"
    )
    never = summary()
    del never["metrics_api_rollback"], never["device_plugin_rollback"]
    never["rollback_rehearsal"] = {"state": "not run"}
    assert run_of(_found(never)).metrics_api_rollback == Rehearsal(None, "not rehearsed")


def test_what_certification_writes_the_fleet_reads(tmp_path: Path) -> None:
    facts = RunFacts(
        "0.1.0", "local", "v1.37.2", "gpu.example.com", "p.yaml", "abc", "2.0.0", (),
        cluster="local/local", finished_at="2026-12-01T22:00:00+00:00",
    )  # fmt: skip
    (tmp_path / "20261201-215500-abcd").mkdir()
    run_dir = tmp_path / "20261201-215500-abcd"
    (run_dir / "rollback-report.json").write_text(
        json.dumps(
            {
                "verdict": "rolled back cleanly",
                "failed_phase": None,
                "rollback_seconds": 0.5,
                "phases": [
                    {"phase": "before", "started": "2026-12-01T21:58:00+00:00"},
                    {"phase": "after_rollback", "started": "2026-12-01T21:59:00+00:00"},
                ],
            }
        )
    )
    result = CheckResult("suites/protocol/test_p.py::test_x", Outcome.PASSED)
    write_summary(summarize([result], facts, run_dir), run_dir)
    os.utime(run_dir / "summary.json", (0, 0))
    run = run_of(read_inputs([tmp_path]).summaries[0])
    assert (run.cluster, run.finished_at, run.verdict) == (
        "local/local",
        datetime(2026, 12, 1, 22, tzinfo=UTC),
        "certified",
    ), run
    assert run.device_plugin_rollback.at == datetime(2026, 12, 1, 21, 59, tzinfo=UTC), run.device_plugin_rollback
    assert run.metrics_api_rollback == Rehearsal(None, "not rehearsed"), run.metrics_api_rollback


def _phase(phase: str, started: str | None) -> dict[str, Any]:
    if started is None:
        return {"phase": phase, "outcome": "not run"}
    return {"phase": phase, "outcome": "passed", "started": started}


def test_the_summary_and_the_fleet_name_the_two_rollbacks_apart(tmp_path: Path) -> None:
    """The metrics API rollback ran alone: clean, while the canary gate holds on the device-plugin one."""
    facts = RunFacts("0.1.0", "local", "v1.37.2", "gpu.example.com", "p.yaml", "abc", "2.0.0", (), cluster="c")
    run_dir = tmp_path / "20261201-215500-abcd"
    run_dir.mkdir()
    metrics = {
        "verdict": "rolled back cleanly",
        "failed_phase": None,
        "rollback_seconds": 2.5,
        "phases": [
            _phase("before", "2026-12-01T21:50:00+00:00"),
            _phase("after_change", "2026-12-01T21:52:00+00:00"),
            _phase("after_rollback", "2026-12-01T21:54:00+00:00"),
        ],
    }
    report = {  # as dra_conformance.rollback.report writes it: the top level's phases are the device-plugin one's
        "verdict": "rolled back cleanly",
        "failed_phase": None,
        "rollback_seconds": 2.5,
        "phases": [_phase(phase, None) for phase in ("before", "after_change", "after_rollback")],
        "rehearsals": {"metrics-v1-v1beta1": metrics},
    }
    (run_dir / "rollback-report.json").write_text(json.dumps(report))
    gate = evaluate(Inputs("system:serviceaccount:d:d", rollback=report), Policy())
    written = summarize([CheckResult("suites/protocol/test_p.py::test_x", Outcome.PASSED)], facts, run_dir, gate)
    assert written["metrics_api_rollback"] == {
        "verdict": "rolled back cleanly",
        "failed_phase": None,
        "rollback_seconds": 2.5,
        "rehearsed_at": "2026-12-01T21:54:00+00:00",
    }, written
    assert written["device_plugin_rollback"] == {"state": "not run"}, written
    assert "rollback_rehearsal" not in written, written
    markdown = render_markdown(written)
    assert (
        "- metrics API rollback (v1 -> v1beta1): rolled back cleanly, rollback took 2.5 s, rehearsed "
        "2026-12-01T21:54:00+00:00\n" in markdown
    ), markdown
    assert "- device-plugin rollback (DRA -> device plugin): not run\n" in markdown, markdown
    assert "{'" not in markdown, f"a Python repr in summary.md:\n{markdown}"
    assert "| device-plugin rollback rehearsed | no (phases recorded: none) |" in markdown, markdown
    write_summary(written, run_dir)
    run = run_of(read_inputs([tmp_path]).summaries[0])
    assert run.metrics_api_rollback == Rehearsal(datetime(2026, 12, 1, 21, 54, tzinfo=UTC), "rolled back cleanly")
    assert run.device_plugin_rollback == Rehearsal(None, "not rehearsed"), run
    fleet = build_fleet([run], datetime(2026, 12, 2, tzinfo=UTC), DEFAULT_STALE_AFTER)
    header, _, row = render_fleet_markdown(fleet).splitlines()[-3:]
    assert "| metrics API rollback (v1 -> v1beta1) | device-plugin rollback (DRA -> device plugin) |" in header
    assert "| hold | not run | 2026-12-01 (rolled back cleanly) | not rehearsed |" in row, row
    clusters = fleet_document(fleet)["clusters"][0]
    assert clusters["metrics_api_rollback"] == {"at": "2026-12-01T21:54:00+00:00", "verdict": "rolled back cleanly"}
    assert clusters["device_plugin_rollback"] == {"at": None, "verdict": "not rehearsed"}, clusters
