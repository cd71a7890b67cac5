"""Socket-level checks on a cluster the suite did not build: the driver's sockets reached through node agents.

The local cluster's real node runs the reference driver as a vendor ships it (image and DaemonSet); the suite is
pointed at that cluster as at any other (`--cluster existing`), so nothing tells it where the driver's sockets are.
With `--dra-node-sockets relay` every connection goes through the relay in the node agent's pod, reached by
port-forward, as from a machine outside the cluster, although this one shares the node's file system. The protocol
suite must then run its socket checks there: none may fail, and those that need only the sockets must pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_conformance import paths
from dra_conformance.backends.local.backend import LocalBackend
from dra_conformance.report.certification import SUMMARY_JSON
from tests.reference_image import IMAGE_BUILD_DEADLINE, SHIPPED_PROFILE, shipped_driver_cluster

pytestmark = [
    pytest.mark.xdist_group("real-node"),
    pytest.mark.skipif(os.geteuid() != 0, reason="not applicable: the real node's kubelet and containerd need root"),
]

# The protocol suite through the relay: about 20 s of checks, plus the agent's pod and the relay's upload.
RUN_DEADLINE = 600.0
OUTPUT_TAIL = 4000
# Checks that talk only to the driver's sockets (registration, prepare and unprepare): through the relay they run.
SOCKET_CHECKS = (
    "test_registration_names_the_driver_and_a_service_the_kubelet_accepts",
    "test_prepare_and_unprepare_are_idempotent[v1]",
    "test_concurrent_prepares_all_succeed",
    "test_unprepare_of_an_unknown_claim_succeeds",
)


@pytest.fixture
def shipped_cluster(tmp_path: Path) -> Iterator[LocalBackend]:
    """The local cluster with the reference driver installed on its real node as shipped."""
    with shipped_driver_cluster(tmp_path / "cluster") as backend:
        yield backend


def _outcomes(junit: Path) -> dict[str, str]:
    """Each test case's outcome (passed, skipped, failure, error) by name, without its xdist group.

    A driver on real nodes only puts the checks that lease its nodes in the real-node xdist group, which xdist
    appends to the test's id (`name@real-node`).
    """
    outcomes = {}
    for case in ET.parse(junit).iter("testcase"):
        marks = [child.tag for child in case if child.tag in ("skipped", "failure", "error")]
        outcomes[str(case.get("name")).split("@", 1)[0]] = marks[0] if marks else "passed"
    return outcomes


@pytest.mark.timeout(IMAGE_BUILD_DEADLINE + 2 * RUN_DEADLINE)
def test_protocol_checks_reach_an_installed_driver_through_the_node_agents_relay(
    shipped_cluster: LocalBackend, tmp_path: Path
) -> None:
    info = shipped_cluster.start()
    reports = tmp_path / "reports"
    command = [
        sys.executable,
        "-m",
        "dra_conformance.cli",
        "run",
        "--cluster",
        "existing",
        "--kubeconfig",
        str(info.kubeconfig),
        "--profile",
        str(SHIPPED_PROFILE),
        "--no-html",
        f"--dra-reports-dir={reports}",
        "--dra-node-sockets=relay",
        "-p",
        "no:cacheprovider",
        str(paths.suites_dir() / "protocol"),
    ]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_DEADLINE, check=False)
    output = (run.stdout + run.stderr)[-OUTPUT_TAIL:]
    written = [p.parent for p in reports.glob(f"*/{SUMMARY_JSON}")]
    assert len(written) == 1, f"one summary expected, found {written} (exit {run.returncode}):\n{output}"
    run_dir = written[0]
    summary = json.loads((run_dir / SUMMARY_JSON).read_text())
    totals = summary["totals"]
    assert not totals.get("failed") and not totals.get("error"), f"through the relay: {summary['reasons']}\n{output}"
    outcomes = _outcomes(run_dir / "junit.xml")
    not_run = {name: outcomes.get(name, "absent") for name in SOCKET_CHECKS if outcomes.get(name) != "passed"}
    assert not not_run, f"socket checks that did not pass through the relay: {not_run}; all: {outcomes}\n{output}"
    assert run.returncode == 0, f"exit {run.returncode}:\n{output}"
