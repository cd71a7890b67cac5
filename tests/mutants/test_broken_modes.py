"""Every broken mode of the reference driver is caught by the check meant for it (each mode is a mutant).

The broken driver runs as the driver under test from a profile, like a vendor's binary, on a cluster of its own;
the named check must fail against it. A mutant that survives means the check proves nothing.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import yaml

from dra_conformance import paths
from fake_dra.broken import BrokenMode

# One private cluster per mutant, one after the other: three clusters on two cores would starve the others.
pytestmark = pytest.mark.xdist_group("mutants")

# Cluster start (~15 s), the check, and the cluster's stop, with room for a busy CI machine.
MUTANT_RUN_DEADLINE = 600.0
EXIT_TESTS_FAILED = 1

DOWNGRADE_CHECK = "test_driver_upgraded_and_downgraded_with_claims_in_flight_keeps_pools_current_and_claims_known"

# Mode -> the check that must fail against it (a test id of the bundled suites).
KILLED_BY = {
    BrokenMode.NON_IDEMPOTENT_PREPARE: "test_prepare_and_unprepare_are_idempotent[v1]",
    BrokenMode.UNPREPARE_UNKNOWN_FAILS: "test_unprepare_of_a_claim_never_prepared_succeeds",
    BrokenMode.UNPREPARE_NEEDS_CLAIM: "test_unprepare_of_a_deleted_claim_succeeds",
    BrokenMode.PREPARE_AFTER_UNPREPARE_FAILS: "test_prepare_after_unprepare_gets_the_allocated_devices_again",
    BrokenMode.PREPARES_FOREIGN_CLAIMS: "test_claim_of_another_node_is_refused_without_node_local_work",
    BrokenMode.IGNORES_STATUS_WRITE_FAILURE: "test_driver_keeps_its_slices_and_its_declared_status_through_api_faults",
    BrokenMode.LOSES_STATE_ON_RESTART: "test_driver_killed_after_a_prepare_comes_back_with_its_pool_and_unprepares",
    BrokenMode.DROPS_POOL_AFTER_DOWNGRADE: DOWNGRADE_CHECK,
}


def _mutant_profile(mode: BrokenMode, directory: Path) -> Path:
    """The reference driver's profile, started with `--broken-mode`; RBAC paths made absolute for the copy."""
    source = paths.reference_driver_profile()
    profile = yaml.safe_load(source.read_text())
    for build in [profile["run"], *profile["run"].get("versions", {}).values()]:
        if "args" in build:
            build["args"].append(f"--broken-mode={mode}")
    profile["identity"]["rbac"] = [str((source.parent / rbac).resolve()) for rbac in profile["identity"]["rbac"]]
    path = directory / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def _failed_tests(reports: Path) -> dict[str, str]:
    """Test name -> failure text, from the run's JUnit."""
    (junit,) = reports.glob("*/junit.xml")
    failed = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            failed[str(case.get("name"))] = " ".join(str(problem.get("message", "")).split())[:400]
    return failed


def test_every_broken_mode_has_a_check_meant_to_catch_it() -> None:
    assert set(KILLED_BY) == set(BrokenMode), f"modes without a check: {set(BrokenMode) - set(KILLED_BY)}"


@pytest.mark.parametrize("mode", list(BrokenMode), ids=str)
def test_broken_mode_is_caught_by_its_check(mode: BrokenMode, tmp_path: Path) -> None:
    check = KILLED_BY[mode]
    name = check.split("[", 1)[0]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_conformance.cli",
            "run",
            "-n",
            "1",
            "--nodes",
            "2",
            f"--profile={_mutant_profile(mode, tmp_path)}",
            f"--cluster-state-dir={tmp_path / 'cluster'}",
            f"--reports-dir={tmp_path / 'reports'}",
            "-p",
            "no:cacheprovider",
            "-k",
            name,
            str(paths.suites_dir()),
        ],
        capture_output=True,
        text=True,
        timeout=MUTANT_RUN_DEADLINE,
        check=False,
    )
    output = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == EXIT_TESTS_FAILED, f"the run against mutant {mode} did not fail its tests:\n{output}"
    failed = _failed_tests(tmp_path / "reports")
    assert check in failed, f"mutant {mode} survived {check}; failed instead: {failed}\n{output}"
