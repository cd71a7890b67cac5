"""The benchmark record (`--json` of bench/*) and bench/compare: merge, ratios and directions, malformed input.

The benches that take a cluster for minutes (mutants, scheduling, parallel_clusters) are not run here: their
figure collection is fed the objects their runs produce and written through the same `save` every bench calls.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.driver.profile import Strictness
from dra_conformance.model.obligations import Basis
from dra_conformance.verdict import Verdict

sys.path.insert(0, str(paths.CHECKOUT / "bench"))
import bench_compare
import bench_mutants
import bench_parallel_clusters
import bench_record
import bench_scheduling
from bench_compare import Change, compare
from bench_record import BenchEntry, Figure, RecordError, higher, lower

from tests.mutants.all_checks import AllChecksRun, MutantVerdicts
from tests.mutants.harness import EXIT_TESTS_FAILED, MUTANTS, MutantRun


def entry(*figures: Figure, commit: str = "c0ffee", argv: list[str] | None = None) -> BenchEntry:
    machine = {"cores": 2, "memory_gib": 7.8, "cpu": "test CPU"}
    return BenchEntry({f.name: f for f in figures}, commit, machine, "2026-12-02T03:00:00Z", argv or [])


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


# --- the record ---------------------------------------------------------------------------------------------------


def test_benches_of_one_day_merge_into_one_record_and_a_rerun_replaces_its_own_entry(tmp_path: Path) -> None:
    record = tmp_path / "2026-12-02.json"
    bench_record.write(record, "cluster_up", entry(lower("warm_start_s", 5.0, "s")))
    bench_record.write(record, "driver", entry(lower("reference-driver.prepare_p99_ms", 1400.0, "ms")))
    bench_record.write(record, "cluster_up", entry(lower("warm_start_s", 4.0, "s"), commit="beef"))
    loaded = bench_record.load(record)
    assert sorted(loaded) == ["cluster_up", "driver"], loaded
    assert loaded["cluster_up"].figures["warm_start_s"].value == 4.0, loaded["cluster_up"]
    assert loaded["cluster_up"].commit == "beef", loaded["cluster_up"]
    assert loaded["driver"].figures["reference-driver.prepare_p99_ms"] == lower(
        "reference-driver.prepare_p99_ms", 1400.0, "ms"
    ), loaded["driver"]


def test_benches_finishing_at_once_all_land_in_the_record(tmp_path: Path) -> None:
    record = tmp_path / "day.json"
    writers = 16
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            barrier.wait(10)
            bench_record.write(record, f"bench{index}", entry(lower("wall_s", index, "s")))
        except BaseException as error:  # reported below with the others
            errors.append(error)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    loaded = bench_record.load(record)
    assert sorted(loaded) == sorted(f"bench{index}" for index in range(writers)), sorted(loaded)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".day.json.") and "lock" not in p.name]


def test_save_writes_the_days_record_with_commit_machine_and_argv_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_record, "RECORD_DIR", tmp_path / "bench")
    monkeypatch.setattr(sys, "argv", ["bench_cluster_up.py", "--runs", "1", "--json"])
    parser = argparse.ArgumentParser()
    bench_record.add_option(parser)
    option = parser.parse_args(["--json"]).json
    bench_record.save(option, "cluster_up", [lower("warm_start_s", 5.0, "s"), higher("rate", float("inf"), "x")])
    written = list((tmp_path / "bench").glob("*.json"))
    assert len(written) == 1 and written[0].name.count("-") == 2, written
    assert written[0].stat().st_mode & 0o777 == bench_record.RECORD_MODE, oct(written[0].stat().st_mode)
    data = json.loads(written[0].read_text())["benches"]["cluster_up"]
    assert data["figures"] == {"warm_start_s": {"value": 5.0, "unit": "s", "better": "lower"}}, data
    assert data["argv"] == ["--runs", "1", "--json"], data
    assert data["machine"]["cores"] and data["commit"] and len(data["load_average"]) == 3, data
    out = capsys.readouterr().out.strip()
    assert out == f"bench record: 1 figures of cluster_up written to {written[0]}; not finite, left out: rate", out


def test_json_option_takes_an_optional_path_and_is_off_without_it() -> None:
    parser = argparse.ArgumentParser()
    bench_record.add_option(parser)
    assert parser.parse_args([]).json is None
    assert parser.parse_args(["--json"]).json == ""
    assert parser.parse_args(["--json", "x.json"]).json == "x.json"


def test_commit_is_unknown_outside_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(bench_record, "CHECKOUT", tmp_path)
    assert bench_record.commit() == "unknown"


def test_a_malformed_existing_record_is_not_overwritten(tmp_path: Path) -> None:
    record = write_json(tmp_path / "day.json", {"benches": []})
    with pytest.raises(RecordError, match="not a bench record"):
        bench_record.write(record, "suites", entry(lower("wall_n1_s", 1.0, "s")))
    assert json.loads(record.read_text()) == {"benches": []}


# --- compare ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("figure", "old", "new", "expected"),
    [
        (lower, 5.0, 6.0, "worse"),
        (lower, 5.0, 4.0, "better"),
        (lower, 5.0, 5.2, "same"),
        (higher, 12.8, 40.0, "better"),
        (higher, 12.8, 10.0, "worse"),
        (higher, 12.8, 12.5, "same"),
        (lower, 0.0, 1.0, "worse"),
        (higher, 0.0, 1.0, "better"),
        (lower, -0.2, -0.1, "worse"),
        (lower, 0.0, 0.0, "same"),
    ],
)
def test_a_change_is_judged_by_the_figures_direction_beyond_the_tolerance(
    figure: Callable[[str, float, str], Figure], old: float, new: float, expected: str
) -> None:
    change = Change("x", figure("x", old, "s"), figure("x", new, "s"))
    assert change.verdict(bench_compare.TOLERANCE) == expected, (old, new, change.worsening)


def test_ratio_is_new_over_old_and_absent_when_old_is_zero() -> None:
    assert Change("x", lower("x", 4.0, "s"), lower("x", 5.0, "s")).ratio == 1.25
    assert Change("x", lower("x", 0.0, "s"), lower("x", 5.0, "s")).ratio is None


def test_compare_notes_no_option_difference_where_only_the_records_path_differs() -> None:
    old = {"driver": entry(lower("wall_s", 100.0, "s"), argv=["--rounds", "3", "--json", "/tmp/base.json"])}
    new = {"driver": entry(lower("wall_s", 99.0, "s"), argv=["--rounds", "3", "--json=/tmp/head.json"])}
    lines = compare(old, new).lines
    assert not any("options differ" in line for line in lines), lines
    other = {"driver": entry(lower("wall_s", 99.0, "s"), argv=["--rounds", "1", "--json"])}
    assert "  note: options differ: --rounds 3 --json /tmp/base.json -> --rounds 1 --json" in compare(old, other).lines


def test_compare_lists_ratios_added_removed_figures_and_benches_and_notes_other_options() -> None:
    old = {
        "cluster_up": entry(lower("warm_start_s", 5.0, "s"), lower("stop_s", 1.0, "s"), argv=["--runs", "5"]),
        "suites": entry(lower("wall_n1_s", 80.0, "s")),
    }
    new = {
        "cluster_up": entry(lower("warm_start_s", 4.0, "s"), higher("speedup", 1.5, "x"), argv=["--runs", "1"]),
        "scheduling": entry(higher("pods_per_second", 12.8, "pods/s")),
    }
    lines = compare(old, new).lines
    text = "\n".join(lines)
    [warm] = [line for line in lines if "warm_start_s" in line]
    assert "5 s ->" in warm and "4 s" in warm and "new/old   0.80" in warm and warm.endswith("better"), warm
    assert any("speedup" in line and "added: 1.5 x" in line for line in lines), text
    assert any("stop_s" in line and "removed (was 1 s)" in line for line in lines), text
    assert "scheduling: added (1 figures, only in the new record)" in lines, text
    assert "suites: removed (1 figures, only in the old record)" in lines, text
    assert "  note: options differ: --runs 5 -> --runs 1" in lines, text
    assert lines[-1] == "0 worse, 1 better, 2 added, 2 removed (same: within 5% of the old value)", lines[-1]


def test_a_unit_change_is_not_judged() -> None:
    change = Change("x", lower("x", 1.0, "s"), lower("x", 1000.0, "ms"))
    assert change.verdict(0.05) == bench_compare.UNIT_CHANGED


def write_record(path: Path, bench: str, *figures: Figure) -> Path:
    bench_record.write(path, bench, entry(*figures))
    return path


def test_compare_exits_0_on_a_regression_and_1_with_fail_on_regression_beyond_its_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write_record(tmp_path / "old.json", "cluster_up", lower("warm_start_s", 5.0, "s"))
    new = write_record(tmp_path / "new.json", "cluster_up", lower("warm_start_s", 6.0, "s"))
    assert bench_compare.main([str(old), str(new)]) == 0
    assert "worse" in capsys.readouterr().out
    assert bench_compare.main([str(old), str(new), "--fail-on-regression", "25"]) == 0
    assert bench_compare.main([str(old), str(new), "--fail-on-regression", "10"]) == 1
    assert "regressions beyond 10%: cluster_up.warm_start_s (+20%)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        ("[]", 'not a bench record: no "benches" object at the top'),
        ('{"format": 1, "benches": {"b": {}}}', 'not a bench record: bench b: no "figures" object'),
        (
            '{"format": 1, "benches": {"b": {"figures": {"f": {"value": "1", "unit": "s", "better": "lower"}}}}}',
            "not a bench record: b.f: value '1' is not a finite number",
        ),
        (
            '{"format": 1, "benches": {"b": {"figures": {"f": {"value": 1, "unit": "s", "better": "up"}}}}}',
            "not a bench record: b.f: better 'up' is not one of lower, higher",
        ),
        ('{"format": 2, "benches": {}}', "not a bench record: format 2, this bench/compare reads format 1"),
    ],
)
def test_a_malformed_record_gives_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    good = write_record(tmp_path / "good.json", "b", lower("f", 1.0, "s"))
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert bench_compare.main([str(good), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"bench/compare: {bad}: {says}\n", captured


def test_a_missing_record_gives_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_record(tmp_path / "good.json", "b", lower("f", 1.0, "s"))
    assert bench_compare.main([str(tmp_path / "gone.json"), str(good)]) == 2
    assert capsys.readouterr().err == f"bench/compare: {tmp_path / 'gone.json'}: no such file\n"


# --- the figures of the benches not run here ----------------------------------------------------------------------


def recorded(tmp_path: Path, bench: str, figures: list[Figure]) -> dict[str, Figure]:
    """`figures` through `save` (what `--json PATH` does at a bench's end), read back."""
    path = tmp_path / "record.json"
    bench_record.save(str(path), bench, figures)
    return bench_record.load(path)[bench].figures


def test_mutants_record_the_score_and_each_mutant_killed_or_not(tmp_path: Path) -> None:
    first, second, third = MUTANTS[0], MUTANTS[1], MUTANTS[2]
    caught = f"ObligationFailed: contract obligation {first.breaks} broke: observed"
    setup_error = 'failed on setup with "RegistryError: fields not in fields.yaml"'
    runs = [
        MutantRun(first, EXIT_TESTS_FAILED, {first.killed_by: caught}, (), "", 60.0),
        MutantRun(second, 0, {}, (second.killed_by,), "", 40.0),
        # The named check failed, but on its setup: no kill, and no verdict either.
        MutantRun(third, EXIT_TESTS_FAILED, {third.killed_by: setup_error}, (), "", 20.0),
    ]
    figures = recorded(tmp_path, "mutants", bench_mutants.named_figures(runs))
    assert round(figures["score_pct"].value) == 33, figures
    assert figures["not_killed"].value == 2 and figures["seconds_total"].value == 120.0, figures
    assert figures[f"{first.name}.killed"].value == 1 and figures[f"{second.name}.killed"].value == 0, figures
    assert figures[f"{third.name}.killed"].value == 0, figures
    assert bench_mutants.verdict(runs[2]).startswith("no verdict"), bench_mutants.verdict(runs[2])


def test_mutants_all_checks_record_refusals_by_basis(tmp_path: Path) -> None:
    mutant = MUTANTS[0]
    summary = {"verdict": str(Verdict.NOT_CERTIFIED), "reasons": [f"{mutant.breaks} (1 checks)"]}
    run = AllChecksRun(mutant, Strictness.CONTRACT, 1, summary, {}, "", 150.0)
    done = [MutantVerdicts(mutant, Basis.CONTRACT, run)]
    figures = recorded(tmp_path, "mutants_all_checks", bench_mutants.whole_suite_figures(done))
    assert figures["refused_pct"].value == 100.0 and figures["contract_refused"].value == 1, figures
    assert figures["named_obligation_refusals"].value == 1 and figures[f"{mutant.name}.refused"].value == 1, figures


def test_scheduling_records_pods_per_second_and_latencies(tmp_path: Path) -> None:
    observed = bench_scheduling.Observed(expected=4)
    for index in range(4):
        observed.on_claim(10.0 + index, {"metadata": {"uid": f"u{index}"}})
        observed.on_claim(10.5 + index, {"metadata": {"uid": f"u{index}"}, "status": {"allocation": {"devices": {}}}})
        observed.on_pod(10.0 + index, {"metadata": {"name": f"p{index}"}, "spec": {}})
        observed.on_pod(10.5 + index, {"metadata": {"name": f"p{index}"}, "spec": {"nodeName": "kwok-node-0"}})
    setup = bench_scheduling.Setup(2, 2, 10, 4, "direct", 8, 0, [], 30.0)
    creation = bench_scheduling.Creation(9.0, 13.0)
    limits = [bench_scheduling.ClientLimits("kube-scheduler", "QPS 50", 1.5, 100)]
    figures = recorded(tmp_path, "scheduling", bench_scheduling.figures(setup, observed, creation, limits))
    # 4 pods from the first pod seen (10.0) to the last binding seen (13.5).
    assert figures["pods_per_second"] == higher("pods_per_second", 1.14286, "pods/s"), figures  # 6 digits kept
    assert figures["allocation_p50_ms"].value == pytest.approx(500.0), figures
    assert figures["kube-scheduler.rate_limiter_wait_s"].value == 1.5, figures
    assert figures["last_binding_after_creation_s"].value == pytest.approx(0.5), figures


def test_parallel_clusters_record_clusters_up_ports_and_memory(tmp_path: Path) -> None:
    clusters = [
        bench_parallel_clusters.Cluster(index, tmp_path / str(index), seconds=30.0 + index) for index in range(3)
    ]
    clusters[0].code, clusters[1].code, clusters[2].code = 0, 0, 1
    found = bench_parallel_clusters.figures(clusters, 0, 0, 0, 2 * 1024**2, 3 * 1024**2)
    figures = recorded(tmp_path, "parallel_clusters", found)
    assert figures["clusters_up"].value == 2 and figures["clusters_failed"].value == 1, figures
    assert figures["resident_gib"].value == 2.0 and figures["mem_available_lowest_gib"].value == 3.0, figures
    assert figures["startup_last_s"].value == 31.0, figures


def test_the_record_names_a_checkout_with_uncommitted_changes_apart_from_its_commit(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "driver.py").write_text("WORKERS = 16\n")
    git("add", "driver.py")
    git("-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "first")
    head = bench_record.commit(tmp_path)
    assert len(head) == 40 and bench_record.UNCOMMITTED not in head, head
    (tmp_path / "notes.txt").write_text("untracked files do not count\n")
    assert bench_record.commit(tmp_path) == head
    (tmp_path / "driver.py").write_text("WORKERS = 100\n")
    assert bench_record.commit(tmp_path) == head + bench_record.UNCOMMITTED
    assert bench_compare.short(head + bench_record.UNCOMMITTED) == head[:10] + bench_record.UNCOMMITTED
