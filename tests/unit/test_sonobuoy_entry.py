"""The plugin container's entry: the run it starts, the results it packs, the done file it always writes."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from dra_conformance import cli, paths
from dra_conformance.sonobuoy import entry, protocol, results

PROFILE = paths.CHECKOUT / "fixtures" / "profiles" / "upstream-test-driver.yaml"
RUN_ID = "20261202-070000-ab12"
TESTS = {
    "suites/protocol/test_protocol.py::test_prepare_returns_the_devices[one]": "passed",
    "suites/protocol/test_protocol.py::TestUnprepare::test_unprepare_is_idempotent": "failed",
    "suites/kubelet/test_kubelet_mode.py::test_cdi_spec_names_the_device": "not applicable",
    "suites/rbac/test_matrix.py::test_node_identity_cannot_read_other_claims": "error",
}
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="suites.protocol.test_protocol" name="test_prepare_returns_the_devices[one]" time="1"/>
<testcase classname="suites.protocol.test_protocol.TestUnprepare" name="test_unprepare_is_idempotent" time="1">
<failure message="protocol.unprepare-idempotent: second call failed">trace</failure></testcase>
<testcase classname="suites.kubelet.test_kubelet_mode" name="test_cdi_spec_names_the_device" time="0">
<skipped type="pytest.skip" message="not applicable: the CDI spec directory of node-1 is not readable">x</skipped>
</testcase>
<testcase classname="suites.rbac.test_matrix" name="test_node_identity_cannot_read_other_claims" time="0">
<error message="failed on setup with &quot;harness&quot;">trace</error></testcase>
</testsuite></testsuites>
"""


def _summary(verdict: str = "not certified") -> dict[str, Any]:
    return {
        "verdict": verdict,
        "reasons": ["1 check(s) failed: protocol.unprepare-idempotent (1 check)"],
        "run": {"driver": "test-driver.cdi.k8s.io", "profile": PROFILE.name, "cluster": "lab-1"},
        "totals": {"passed": 1, "failed": 1, "not applicable": 1, "error": 1},
        "tests": TESTS,
    }


class FakeRun:
    """Stands in for `dra-conformance run`: records its command, writes a run directory, returns its code."""

    def __init__(self, code: int = 1, writes_run: bool = True, raises: BaseException | None = None) -> None:
        self.code, self.writes_run, self.raises = code, writes_run, raises
        self.command: list[str] = []

    def __call__(self, command: Sequence[str], log: Path, echo: IO[str]) -> tuple[int, list[str]]:
        self.command = list(command)
        log.write_text("collected 4 items\nverdict: not certified\n")
        if self.raises is not None:
            raise self.raises
        if self.writes_run:
            reports = Path(next(a for a in command if a.startswith("--dra-reports-dir=")).split("=", 1)[1])
            run_dir = reports / RUN_ID
            (run_dir / "allure-results").mkdir(parents=True)
            (run_dir / "allure-results" / "0a-result.json").write_text("{}")
            (run_dir / "summary.json").write_text(json.dumps(_summary()))
            (run_dir / "summary.md").write_text("# test-driver.cdi.k8s.io: not certified\n")
            (run_dir / "junit.xml").write_text(JUNIT)
        return self.code, ["Exit: dra-conformance: cluster https://10.96.0.1:443 is not usable: unreachable"]


def _settings(results_dir: Path, profile: Path | None = PROFILE) -> entry.EntrySettings:
    return entry.EntrySettings(profile, "lab-1", results_dir, ("-k", "protocol"))


def _delivered(results_dir: Path) -> tuple[Path, dict[str, bytes]]:
    done = results_dir / protocol.DONE_FILE
    assert done.is_file(), f"no done file in {sorted(p.name for p in results_dir.iterdir())}"
    listed = Path(done.read_text())
    assert listed.is_file() and listed.parent == results_dir, f"done names {listed}"
    with tarfile.open(listed, "r:gz") as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]
    return listed, files


def test_entry_runs_the_suite_in_cluster_with_the_mounted_profile_the_cluster_name_and_the_results_volume(
    tmp_path: Path,
) -> None:
    fake = FakeRun()
    entry.entry(_settings(tmp_path), echo=io.StringIO(), runner=fake)
    assert fake.command[3:] == [
        "run",
        "--cluster",
        "existing",
        "--profile",
        str(PROFILE),
        "--dra-cluster-name=lab-1",
        f"--dra-reports-dir={tmp_path / entry.REPORTS_SUBDIR}",
        "-k",
        "protocol",
    ], fake.command


def test_done_lists_a_tarball_with_junit_summary_allure_results_log_and_the_manual_results(tmp_path: Path) -> None:
    code = entry.entry(_settings(tmp_path), echo=io.StringIO(), runner=FakeRun(code=1))
    assert code == entry.EXIT_VERDICT, "a run that reached a verdict delivered its result, whatever the verdict"
    tarball, files = _delivered(tmp_path)
    assert tarball.name.endswith(".tar.gz"), "the worker sends .gz as application/gzip, which the aggregator unpacks"
    expected = {"junit.xml", "summary.json", "summary.md", "allure-results/0a-result.json", "run.log"}
    assert expected | {protocol.RESULTS_FILE} <= set(files), sorted(files)
    document = yaml.safe_load(files[protocol.RESULTS_FILE])
    verdict, *suites = document["items"]
    assert verdict["status"] == "Verdict not certified", verdict
    assert "protocol.unprepare-idempotent" in verdict["details"]["reasons"][0]
    leaves = {leaf["name"]: leaf for suite in suites for leaf in suite["items"]}
    assert {name: leaf["status"] for name, leaf in leaves.items()} == {
        nodeid: {"not applicable": "not applicable", "error": "error"}.get(o, o) for nodeid, o in TESTS.items()
    }
    failed = leaves["suites/protocol/test_protocol.py::TestUnprepare::test_unprepare_is_idempotent"]
    assert failed["details"]["reason"] == "protocol.unprepare-idempotent: second call failed", failed
    skipped = leaves["suites/kubelet/test_kubelet_mode.py::test_cdi_spec_names_the_device"]
    assert skipped["details"]["reason"].startswith("not applicable: the CDI spec directory"), skipped
    assert sorted(s["name"] for s in suites) == ["kubelet", "protocol", "rbac"]


def test_a_run_refused_before_any_report_still_writes_done_with_a_failed_item_naming_why(tmp_path: Path) -> None:
    code = entry.entry(_settings(tmp_path), echo=io.StringIO(), runner=FakeRun(code=2, writes_run=False))
    assert code == entry.EXIT_NO_VERDICT
    _tarball, files = _delivered(tmp_path)
    document = yaml.safe_load(files[protocol.RESULTS_FILE])
    (item,) = document["items"]
    assert item["status"] == "failed", item
    assert "exit code 2" in item["name"] and "unreachable" in item["name"], item["name"]
    assert b"verdict: not certified" in files["run.log"]


def test_a_crash_of_the_entry_during_the_run_still_writes_done_and_is_raised(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="worker pool broke"):
        entry.entry(_settings(tmp_path), echo=io.StringIO(), runner=FakeRun(raises=RuntimeError("worker pool broke")))
    _tarball, files = _delivered(tmp_path)
    (item,) = yaml.safe_load(files[protocol.RESULTS_FILE])["items"]
    assert item["status"] == "failed" and "never started" in item["name"], item
    assert "worker pool broke" in item["details"]["output"], item


def test_missing_profile_is_one_line_exit_2_and_done_is_still_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["sonobuoy-entry", "--cluster-name", "lab-1", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--profile" in err, (code, err)
    _tarball, files = _delivered(tmp_path)
    (item,) = yaml.safe_load(files[protocol.RESULTS_FILE])["items"]
    assert item["status"] == "failed" and "--profile" in item["name"], item


def test_an_absent_mounted_profile_is_one_line_exit_2_and_done_is_still_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = tmp_path / "config" / "driver.yaml"
    code = entry.entry(_settings(tmp_path / "results", absent), echo=io.StringIO(), runner=FakeRun())
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(absent) in err, (code, err)
    _delivered(tmp_path / "results")


def test_results_directory_is_the_one_sonobuoy_names_in_the_environment(tmp_path: Path) -> None:
    assert entry.results_dir_from({protocol.RESULTS_DIR_ENV: str(tmp_path)}, None) == tmp_path
    assert entry.results_dir_from({}, None) == protocol.RESULTS_DIR
    assert entry.results_dir_from({protocol.RESULTS_DIR_ENV: "/elsewhere"}, tmp_path) == tmp_path


@pytest.mark.parametrize(
    "verdict", ["certified", "certified with advisories", "not certified", "incomplete"], ids=lambda v: v
)
def test_verdict_status_is_a_status_of_its_own_that_sonobuoy_counts_whole(verdict: str) -> None:
    status = results.verdict_status(verdict)
    assert status not in (protocol.PASSED, protocol.FAILED, protocol.SKIPPED, "unknown", "timeout", "")
    assert not any(separator in status for separator in protocol.CUSTOM_STATUS_SEPARATORS), status
    # First in Sonobuoy's sorted status summary, which `sonobuoy status` shows as the plugin's RESULT.
    assert sorted([*results.STATUS_OF_OUTCOME.values(), "unknown", "timeout", status])[0] == status


def test_junit_key_is_the_classname_and_name_pytest_writes() -> None:
    assert results.junit_key("suites/a/test_b.py::TestC::test_d[x-y]") == ("suites.a.test_b.TestC", "test_d[x-y]")
    assert results.junit_key("suites/a/test_b.py::test_d") == ("suites.a.test_b", "test_d")
