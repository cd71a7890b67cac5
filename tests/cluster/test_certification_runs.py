"""The certification runs CI makes besides the suites with the reference driver, each as `dra-conformance run` would.

- Kubernetes' own DRA test driver, a driver we did not write, certified from its profile on kwok nodes;
- the real node's tier, one driver at a time: the device-plugin rollback rehearsal; the reference driver as a vendor
  ships it (its image archive, built by our own code, and manifests: fixed kubelet paths, real nodes only); and the
  upstream test driver's kubelet-mode checks.

They ran one after another after the main test run; most of their time is waiting on the kubelet (about 95
CPU-seconds in the upstream driver's four minutes), so as tests they overlap with the CPU-bound rest. The real-node
runs share the xdist group of every other real-node test: one real node per machine. Each run's reports stay under
reports/ like any run's, and its certification summary is printed (shown with -rP, and with a failure).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from dra_conformance import paths
from tests.reference_image import IMAGE_BUILD_DEADLINE, build_reference_image

# A whole default run on kwok nodes, or the kubelet suite on a real node (~4 min alone), on a CI machine whose two
# cores the other tests keep busy.
CERTIFICATION_RUN_DEADLINE = 1800.0
OUTPUT_TAIL = 4000
# The kubelet suite's two longest checks wait out the kubelet's own deadline and backoff (about 110 s together) on a
# fault our kubelet-side interposer injects, whatever the driver behind it. The Sonobuoy recipe judges them on the
# real node; the runs of one suite from the host leave them out, which keeps CI on its time budget.
NOT_THE_INTERPOSERS_WAITS = ("-k", "not hung_prepare and not allocated-but-prepare-failed")


@dataclass(frozen=True)
class CertificationRun:
    """One run CI makes, and the verdict it must end in."""

    name: str
    args: tuple[str, ...]
    # The verdicts that pass: a whole run certifies; a run of one suite is "incomplete" by design (only a full
    # selection certifies), and then no check may fail.
    verdicts: tuple[str, ...]
    real_node: bool = False
    # Installs the reference driver's image archive, which the run builds first (reports/images/).
    shipped_image: bool = False
    # Its profile declares transforms of the manifests: the summary must list them.
    transformed: bool = False


RUNS = (
    CertificationRun(
        "upstream-test-driver-on-kwok",
        ("--profile", "fixtures/profiles/upstream-test-driver.yaml"),
        ("certified", "certified with advisories"),
    ),
    CertificationRun(
        "device-plugin-rollback-on-the-real-node",
        ("--real-node", "suites/rollback/test_device_plugin_rollback.py"),
        ("incomplete",),
        real_node=True,
    ),
    # The reference driver from a chart rendered as vendors' are (no toleration, a registry image with pull policy
    # Always, no Namespace), fixed only by declared transforms: its kubelet suite from the host passes, and the
    # transforms are in its summary. Its whole selection is certified in-cluster by the README's nightly recipe
    # (tests/cluster/test_sonobuoy_path.py), the interposer's two waits included; a second whole run of the same
    # driver from the host cost CI eleven minutes on the real node and judged nothing the two do not.
    CertificationRun(
        "reference-driver-vendor-chart-kubelet-suite",
        (
            "--real-node",
            "--profile",
            "fixtures/profiles/reference-driver-vendor-chart.yaml",
            "suites/kubelet",
            *NOT_THE_INTERPOSERS_WAITS,
        ),
        ("incomplete",),
        real_node=True,
        shipped_image=True,
        transformed=True,
    ),
    # The legitimate variant that refuses a device another claim still holds, as shipped: the kubelet retries, the
    # suite deletes its pods gracefully, and the kubelet suite judges it after the retries.
    CertificationRun(
        "shipped-variant-refusing-held-devices-kubelet-suite",
        (
            "--real-node",
            "--profile",
            "fixtures/profiles/shipped-variants/prepare-refused-while-device-held.yaml",
            "suites/kubelet",
            *NOT_THE_INTERPOSERS_WAITS,
        ),
        ("incomplete",),
        real_node=True,
        shipped_image=True,
        transformed=True,
    ),
    CertificationRun(
        "upstream-test-driver-kubelet-suite",
        (
            "--real-node",
            "--profile",
            "fixtures/profiles/upstream-test-driver.yaml",
            "suites/kubelet",
            *NOT_THE_INTERPOSERS_WAITS,
        ),
        ("incomplete",),
        real_node=True,
    ),
)


def _summary(reports: Path) -> dict[str, object]:
    found = sorted(reports.glob("*/summary.json"))
    assert len(found) == 1, f"one run's summary expected under {reports}: {found}"
    summary: dict[str, object] = json.loads(found[0].read_text())
    return summary


# The body holds its own named deadlines (the image build, the run); the suite-wide 300 s would cut a cold image
# build (any change to the driver's files, ~2 min) plus a real-node run on a busy machine first, without saying which.
@pytest.mark.timeout(IMAGE_BUILD_DEADLINE + CERTIFICATION_RUN_DEADLINE)
@pytest.mark.parametrize(
    "run",
    [pytest.param(r, marks=[pytest.mark.xdist_group("real-node")] if r.real_node else []) for r in RUNS],
    ids=lambda r: r.name,
)
def test_certification_run_ends_in_its_verdict_with_no_check_failed(run: CertificationRun) -> None:
    if run.shipped_image:  # where the shipped profile's install.images names it
        failed = build_reference_image(paths.CHECKOUT / "reports" / "images" / "reference-driver.tar")
        assert failed is None, f"image build: {failed}"
    reports = paths.CHECKOUT / "reports" / "ci" / run.name
    shutil.rmtree(reports, ignore_errors=True)  # this check's earlier run: its summary would be read as this one's
    command = [
        sys.executable,
        "-m",
        "dra_conformance.cli",
        "run",
        "-n",
        "1",  # CI's two workers keep both cores busy
        f"--dra-state-dir={paths.CHECKOUT / 'reports' / 'clusters' / run.name}",
        f"--dra-reports-dir={reports}",
        *run.args,
    ]
    done = subprocess.run(
        command, cwd=paths.CHECKOUT, capture_output=True, text=True, timeout=CERTIFICATION_RUN_DEADLINE, check=False
    )
    output = done.stdout + done.stderr
    start = output.find("certification summary")
    print(output[start:] if start >= 0 else output[-OUTPUT_TAIL:])
    assert done.returncode == 0, f"{run.name}: exit {done.returncode}\n{output[-OUTPUT_TAIL:]}"
    summary = _summary(reports)
    totals = summary["totals"]
    assert isinstance(totals, dict) and not totals.get("failed") and not totals.get("error"), (
        f"{run.name}: {summary['reasons']}"
    )
    assert summary["verdict"] in run.verdicts, f"{run.name}: verdict {summary['verdict']}: {summary['reasons']}"
    if run.transformed:
        recorded = summary["run"]["install_transforms"]  # type: ignore[index]
        assert recorded, f"{run.name}: the profile declares transforms, the summary lists none: {summary['run']}"
