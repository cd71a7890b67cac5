"""Every behaviour the contract allows is certified: the reference driver's legitimate variants pass the suites.

The reference driver must never become the definition of correct. Each variant (a start-time option, with a
profile in fixtures/profiles/reference-variants/) runs the suites that judge what it changes, as the driver under
test, swapped into a local cluster the variants share (a fresh driver each: `tests.shared_cluster`); no check may
fail or error, and the defensive obligation it departs from is
reported as an advisory (none where the variant only drops an undeclared capability). The whole default suite
per variant (the closing note's figures) takes minutes each; this is the part CI can afford.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_conformance import paths
from tests.shared_cluster import stop_shared_cluster, swap_in

VARIANTS = paths.CHECKOUT / "fixtures" / "profiles" / "reference-variants"
# The suites that judge the variant (~1 min), with room for a busy machine.
VARIANT_RUN_DEADLINE = 600.0
# Fake nodes of the variants' cluster, as a default run has.
VARIANT_NODES = 2
# One cluster, the variants one after another, each swapping its driver in: a cluster start per variant cost ~30
# CPU-seconds, and two variants at once would starve the other tests.
pytestmark = pytest.mark.xdist_group("variants")


@pytest.fixture(scope="module")
def variant_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The state directory of the cluster the variants share (started by the first); stopped after the last."""
    cluster = tmp_path_factory.mktemp("variant-cluster") / "cluster"
    try:
        yield cluster
    finally:
        stop_shared_cluster(cluster)


# The advisory each variant must produce: the defensive obligation it departs from (None: it departs from none).
EXPECTED_ADVISORY = {
    "status-data-only": "status.ready-condition-true",
    "status-kept-after-unprepare": "status.entries-removed-after-unprepare",
    "unknown-claim-whole-call": "protocol.refusal-is-per-claim",
    "no-health-service": None,
    "health-v1alpha1-only": "protocol.health-service-v1",
    "prepare-refused-while-device-held": None,
}
# The checks that judge what each variant changes (bundled suite paths): CI affords these, not a whole run each.
JUDGED_BY = {
    "status-data-only": ("status", "protocol/test_protocol.py"),
    "status-kept-after-unprepare": ("status", "protocol/test_protocol.py"),
    "unknown-claim-whole-call": ("status", "protocol/test_protocol.py", "protocol/test_kubelet_faults.py"),
    "no-health-service": ("protocol/test_health.py", "protocol/test_protocol.py"),
    "health-v1alpha1-only": ("protocol/test_health.py", "protocol/test_protocol.py"),
    # The checks that prepare claims again and again on few devices (idempotence, batches, a claim deleted while
    # prepared, devices released after their pods): none may be refused while no other claim holds its device. On
    # fake nodes the suite plays a kubelet that unprepares before the device is allocated again, so no refusal comes.
    "prepare-refused-while-device-held": (
        "status",
        "protocol/test_protocol.py",
        "protocol/test_kubelet_faults.py",
        "protocol/test_batches.py",
        "allocation",
    ),
}


def test_every_variant_profile_is_tested() -> None:
    assert sorted(p.stem for p in VARIANTS.glob("*.yaml")) == sorted(EXPECTED_ADVISORY) == sorted(JUDGED_BY)


@pytest.mark.parametrize("variant", sorted(EXPECTED_ADVISORY))
def test_a_legitimate_variant_breaks_no_contract_obligation(
    variant: str, tmp_path: Path, variant_cluster: Path
) -> None:
    reports = tmp_path / "reports"
    profile = VARIANTS / f"{variant}.yaml"
    refused = swap_in(profile, variant_cluster, VARIANT_NODES)
    assert refused is None, f"{variant}: {refused}"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_conformance.cli",
            "run",
            "--no-html",
            "-n",
            "0",  # in the run's own process: CI's two workers are busy with other tests
            f"--nodes={VARIANT_NODES}",
            f"--profile={profile}",
            f"--dra-state-dir={variant_cluster}",
            f"--dra-reports-dir={reports}",
            "-p",
            "no:cacheprovider",
            *(str(paths.suites_dir() / path) for path in JUDGED_BY[variant]),
        ],
        capture_output=True,
        text=True,
        timeout=VARIANT_RUN_DEADLINE,
        check=False,
    )
    output = result.stdout + result.stderr
    summaries = list(reports.glob("*/summary.json"))
    assert len(summaries) == 1, f"one summary expected: {summaries}\n{output[-3000:]}"
    summary = json.loads(summaries[0].read_text())
    totals = summary["totals"]
    assert not totals.get("failed") and not totals.get("error"), f"{variant}: {summary['reasons']}\n{output[-3000:]}"
    assert result.returncode == 0, output[-3000:]
    advisories = {a["id"] for a in summary["advisories"]}
    expected = EXPECTED_ADVISORY[variant]
    if expected is not None:
        assert expected in advisories, f"{variant}: advisories {sorted(advisories)}, expected {expected}"
    failed = {c: row for c, row in summary["capabilities"].items() if row["state"] == "failed"}
    assert not failed, f"{variant}: capabilities failed {failed}"
