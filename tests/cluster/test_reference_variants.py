"""Every behaviour the contract allows is certified: the reference driver's legitimate variants pass the suites.

The reference driver must never become the definition of correct. Each variant (a start-time option, with a
profile in fixtures/profiles/reference-variants/) runs the suites that judge what it changes, as the driver under
test on a private local cluster; no check may fail or error, and the defensive obligation it departs from is
reported as an advisory (none where the variant only drops an undeclared capability). The whole default suite
per variant (the closing note's figures) takes minutes each; this is the part CI can afford.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dra_conformance import paths

VARIANTS = paths.CHECKOUT / "fixtures" / "profiles" / "reference-variants"
# A warm cluster start and the suites that judge the variant at -n 2 (~1 min), with room for a busy machine.
VARIANT_RUN_DEADLINE = 600.0
# The advisory each variant must produce: the defensive obligation it departs from (None: it departs from none).
EXPECTED_ADVISORY = {
    "status-data-only": "status.ready-condition-true",
    "status-kept-after-unprepare": "status.entries-removed-after-unprepare",
    "unknown-claim-whole-call": "protocol.refusal-is-per-claim",
    "no-health-service": None,
    "health-v1alpha1-only": "protocol.health-service-v1",
}
# The checks that judge what each variant changes (bundled suite paths): CI affords these, not a whole run each.
JUDGED_BY = {
    "status-data-only": ("status", "protocol/test_protocol.py"),
    "status-kept-after-unprepare": ("status", "protocol/test_protocol.py"),
    "unknown-claim-whole-call": ("status", "protocol/test_protocol.py", "protocol/test_kubelet_faults.py"),
    "no-health-service": ("protocol/test_health.py", "protocol/test_protocol.py"),
    "health-v1alpha1-only": ("protocol/test_health.py", "protocol/test_protocol.py"),
}


def test_every_variant_profile_is_tested() -> None:
    assert sorted(p.stem for p in VARIANTS.glob("*.yaml")) == sorted(EXPECTED_ADVISORY) == sorted(JUDGED_BY)


@pytest.mark.parametrize("variant", sorted(EXPECTED_ADVISORY))
def test_a_legitimate_variant_breaks_no_contract_obligation(variant: str, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_conformance.cli",
            "run",
            "-n",
            "2",
            f"--profile={VARIANTS / f'{variant}.yaml'}",
            f"--dra-cluster-state-dir={tmp_path / 'cluster'}",
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
