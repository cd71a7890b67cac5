"""The metrics suite against the real metrics-server v0.9.0 (v1beta1 only), in a cluster of its own.

Expected: v1 checks, parity and the availability watch (no --dra-metrics-watch) are skipped with the reason, v1beta1
is Available and fresh, kubectl top and the HPA controller are found in the consumer inventory, and the verdict says
to fix the implementation first (no v1: "fix first: v1 unavailable (no APIService)").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.model.cluster import ClusterInfo

# A second cluster starts (~5 s), metrics-server needs two scrapes (15 s apart), and the suite waits for a new sample.
INNER_RUN_TIMEOUT = 240.0


def test_metrics_suite_against_metrics_server_skips_v1_and_measures_v1beta1(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    if cluster.backend != "local":
        pytest.skip("starts a second local cluster running metrics-server")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "suites/metrics",
            "-p",
            "no:cacheprovider",
            "-rs",
            "-v",
            "--dra-metrics=metrics-server",
            "--dra-nodes=1",
            f"--dra-state-dir={tmp_path / 'cluster'}",
            f"--dra-reports-dir={tmp_path / 'reports'}",
        ],
        cwd=paths.CHECKOUT,
        capture_output=True,
        text=True,
        timeout=INNER_RUN_TIMEOUT,
        check=False,
    )
    output = result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert "1 failed, 5 passed, 4 skipped" in summary, f"summary: {summary!r}\n{output[-4000:]}"
    assert "metrics.k8s.io/v1 not served (discovery lists v1beta1)" in output, output[-4000:]
    assert "no --dra-metrics-watch DURATION given" in output, output[-4000:]
    assert "test_verdict_needs_no_implementation_fix_and_no_autoscaling_hold FAILED" in output, output[-4000:]
    assert "verdict: ['fix first: v1 unavailable (no APIService)'" in output, output[-4000:]
