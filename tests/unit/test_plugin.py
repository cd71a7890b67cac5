"""In a run that asks for DRA conformance, the plugin rejects bad options in one line and reports in reports/<run-id>/.

tests/unit/test_opt_in.py: a run that does not ask meets none of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_conformance.exits import EXIT_CANNOT_RUN

PASSING_TEST = "def test_nothing():\n    assert True\n"


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_sample=PASSING_TEST)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def _error_line(result: pytest.RunResult) -> str:
    errors = [line for line in result.errlines if line.strip()]
    assert "Traceback" not in "\n".join(result.errlines), result.errlines
    assert len(errors) == 1, f"expected one error line, got {errors}"
    return errors[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--dra-cluster=existing"], "ERROR: --dra-cluster=existing needs --dra-kubeconfig (or $KUBECONFIG)"),
        (["--dra-nodes=0"], "ERROR: --dra-nodes must be at least 1, got 0"),
        (["--dra-timeout-delete=-3"], "ERROR: timeouts must be positive: --dra-timeout-delete=-3.0"),
    ],
    ids=["existing-without-kubeconfig", "zero-nodes", "negative-timeout"],
)
def test_bad_options_are_one_line_usage_errors(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)  # else it names the existing cluster's kubeconfig
    result = _run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert _error_line(result) == expected


def test_unreadable_kubeconfig_is_a_usage_error(pytester: pytest.Pytester) -> None:
    kubeconfig = pytester.path / "kubeconfig"
    kubeconfig.write_text("- just\n- a list\n")
    result = _run(pytester, "--dra-cluster=existing", f"--dra-kubeconfig={kubeconfig}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert _error_line(result).startswith(f"ERROR: kubeconfig {kubeconfig}: "), result.errlines


def test_junit_and_allure_results_of_an_opted_in_run_land_in_the_run_directory(pytester: pytest.Pytester) -> None:
    reports = pytester.path / "out"
    result = _run(pytester, f"--dra-reports-dir={reports}")
    result.assert_outcomes(passed=1)
    runs = list(reports.iterdir())
    assert len(runs) == 1, runs
    produced = sorted(p.name for p in runs[0].iterdir())
    assert produced == ["allure-results", "junit.xml"], produced
    assert 'tests="1"' in (runs[0] / "junit.xml").read_text()
    assert any(p.name.endswith("-result.json") for p in (runs[0] / "allure-results").iterdir())


def test_run_directory_is_shared_by_xdist_workers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_more="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    reports = pytester.path / "out"
    result = _run(pytester, f"--dra-reports-dir={reports}", "-n", "2")
    result.assert_outcomes(passed=3)
    runs = list(Path(reports).iterdir())
    assert len(runs) == 1, f"workers wrote to several run directories: {runs}"
    results = [p for p in (runs[0] / "allure-results").iterdir() if p.name.endswith("-result.json")]
    assert len(results) == 3, results


def test_catalog_with_an_unknown_key_fails_collection_in_one_line(pytester: pytest.Pytester) -> None:
    catalog_dir = pytester.path / "scenarios"
    catalog_dir.mkdir()
    (catalog_dir / "broken.yaml").write_text(
        "scenarios:\n- id: typo\n  description: d\n  pods: [{name: app, claims: []}]\n  expect: {}\n  podz: []\n"
    )
    result = _run(pytester, f"--dra-catalog={catalog_dir}")
    assert result.ret == EXIT_CANNOT_RUN
    assert (
        _error_line(result) == f"Exit: dra-conformance: {catalog_dir / 'broken.yaml'}: scenarios[0].podz: unknown key"
    )


def test_profile_with_a_misspelled_key_stops_the_run_in_one_line(pytester: pytest.Pytester) -> None:
    profile = pytester.path / "driver.yaml"
    profile.write_text(
        "apiVersion: dra-conformance.io/v1alpha1\nkind: DriverProfile\ndriver: gpu.example.com\n"
        "identity: {serviceAccount: {namespace: d, name: d}}\ndeviceClasses: [{name: c, create: true}]\n"
        "devices: {perNode: 1}\ncapabilities: {healthStrem: true}\n"
    )
    result = _run(pytester, f"--dra-profile={profile}")
    assert result.ret == EXIT_CANNOT_RUN
    assert _error_line(result) == f"Exit: dra-conformance: {profile}:7: capabilities.healthStrem: unknown key"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["no-xdist", "xdist"])
def test_checks_deselected_by_k_are_not_counted_as_never_run(pytester: pytest.Pytester, workers: list[str]) -> None:
    suite = pytester.mkdir("suites") / "demo"
    suite.mkdir()
    (suite / "test_demo.py").write_text("def test_kept():\n    pass\n\ndef test_left_out():\n    pass\n")
    # A `suites` directory of the project's own is not the bundled suites: --dra-conformance opts the run in.
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--dra-conformance", "-k", "kept", *workers, "suites"
    )
    result.assert_outcomes(passed=1, deselected=0 if workers else 1)  # xdist's controller reports no deselection
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
