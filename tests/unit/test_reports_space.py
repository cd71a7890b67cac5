"""A full reports file system: files whole or absent, the verdict written first, one line naming the path and space."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_conformance.errors import ReportsFull
from dra_conformance.model.obligations import Basis, Registry
from dra_conformance.model.records import RunRecords, Section, read_records
from dra_conformance.report import reports_space
from dra_conformance.report.certification import SUMMARY_JSON, VERDICT_JSON, write_summary
from dra_conformance.report.writer import write_report
from dra_conformance.rollback.state import Phase, PhaseRecord, RehearsalState
from tests.tmpfs import mounted_tmpfs

# A file system small enough to fill in a moment; tmpfs counts whole 4 KiB pages.
TINY_FS = "64k"


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs of this test's own, unmounted afterwards (root only: else not applicable)."""
    with mounted_tmpfs(tmp_path / "reports", TINY_FS) as mount_point:
        yield mount_point


def _fill(directory: Path) -> None:
    """Take every free block of `directory`'s file system."""
    with (directory / "filler").open("wb", buffering=0) as filler:  # unbuffered: closing has nothing left to write
        try:
            while True:
                filler.write(bytes(4096))
        except OSError as error:
            assert error.errno == errno.ENOSPC, error


def _scratch(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.endswith((reports_space.PARTIAL_SUFFIX, ".tmp"))]


def test_an_atomic_write_on_a_full_disk_leaves_the_old_file_and_no_scratch(tiny_fs: Path) -> None:
    target = tiny_fs / "summary.json"
    target.write_text("old")
    _fill(tiny_fs)
    with pytest.raises(OSError) as refused:
        reports_space.write_atomically(target, "x" * 100_000)
    assert reports_space.is_full(refused.value), refused.value
    assert target.read_text() == "old" and not _scratch(tiny_fs), (target.read_text(), _scratch(tiny_fs))
    line = reports_space.full_line(target, refused.value)
    assert line.startswith(f"reports dir full: cannot write {target} (No space left on device);"), line
    assert line.endswith("bytes left on its file system"), line


def test_the_verdict_is_written_into_the_space_set_aside_and_the_rest_is_one_line(tiny_fs: Path) -> None:
    run_dir = tiny_fs / "run"
    assert reports_space.reserve(run_dir) is None
    _fill(tiny_fs)
    summary: dict[str, Any] = {"verdict": "certified", "totals": {"passed": 3}, "padding": "x" * 100_000}

    problem = write_summary(summary, run_dir)

    assert problem is not None and f"cannot write {run_dir / SUMMARY_JSON}" in problem and "\n" not in problem, problem
    assert (run_dir / VERDICT_JSON).read_text().count('"certified"') == 1, (run_dir / VERDICT_JSON).read_text()
    assert not (run_dir / SUMMARY_JSON).exists() and not _scratch(tiny_fs), list(run_dir.iterdir())


def test_a_section_whose_artifact_does_not_fit_says_so_instead_of_raising(tiny_fs: Path) -> None:
    run_dir = tiny_fs / "run"
    run_dir.mkdir()
    _fill(tiny_fs)

    def summarize(_: list[dict[str, Any]]) -> Section:
        return Section("latency", ["a line"], artifact="latency.json", document={"x": "y" * 10_000})

    sections = write_report(run_dir, {"latency": summarize})

    assert [s.lines for s in sections] == [["a line"]], sections
    assert any("reports dir full: cannot write" in alert for alert in sections[0].alerts), sections[0].alerts
    assert not (run_dir / "latency.json").exists() and not _scratch(tiny_fs)


def test_a_record_that_does_not_fit_is_the_suites_problem_not_the_drivers(tiny_fs: Path) -> None:
    _fill(tiny_fs)
    with pytest.raises(ReportsFull) as refused:
        RunRecords(tiny_fs / "run", "gw0").add("latency", {"x": "y" * 10_000})
    assert "reports dir full: cannot record latency in" in str(refused.value), str(refused.value)
    registered = Registry.load().obligations[ReportsFull.obligation]
    assert registered.basis is Basis.HARNESS, registered


def test_a_record_cut_short_by_a_full_disk_leaves_the_earlier_records_whole_and_readable(tiny_fs: Path) -> None:
    records = RunRecords(tiny_fs / "run", "gw0")
    records.add("latency", {"first": 1})  # its file's first page, with room left in it
    _fill(tiny_fs)
    with pytest.raises(ReportsFull):
        records.add("latency", {"x": "y" * 10_000})  # fits the page's rest only in part
    written = (tiny_fs / "run" / "records" / "latency" / "gw0.jsonl").read_text()
    assert written == '{"first": 1}\n', f"the cut record left {len(written)} bytes: {written[:80]!r}"
    assert read_records(tiny_fs / "run", "latency") == [{"first": 1}]


def test_a_last_record_line_with_no_newline_is_a_cut_write_and_left_out(tmp_path: Path) -> None:
    path = tmp_path / "records" / "latency" / "gw1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"a": 1}\n{"b": 2}\n{"c": ')
    assert read_records(tmp_path, "latency") == [{"a": 1}, {"b": 2}]
    path.write_text('{"a": 1}\nnot json\n')
    with pytest.raises(ValueError):
        read_records(tmp_path, "latency")


def test_a_rollback_state_that_does_not_fit_keeps_the_last_one_and_leaves_no_scratch(tiny_fs: Path) -> None:
    path = tiny_fs / "rollback-state.json"
    state = RehearsalState(path)
    state.records[Phase.BEFORE] = PhaseRecord(Phase.BEFORE, "t0", 1.5, {"setup": {}})
    state.save()
    saved = path.read_text()
    _fill(tiny_fs)
    state.records[Phase.AFTER_CHANGE] = PhaseRecord(Phase.AFTER_CHANGE, "t1", 2.5, {"padding": "x" * 100_000})
    with pytest.raises(ReportsFull) as refused:
        state.save()
    assert f"cannot save {path}" in str(refused.value), str(refused.value)
    assert path.read_text() == saved and not _scratch(tiny_fs), _scratch(tiny_fs)
