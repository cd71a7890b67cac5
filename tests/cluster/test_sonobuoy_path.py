"""The suite in-cluster through Sonobuoy, as a platform team runs it nightly: on the local cluster's real node.

The reference driver is installed as a vendor ships it (its image and DaemonSet, the shipped profile). Our images
(the suite's, Sonobuoy's) are built by our own code and imported into the real node's containerd. Sonobuoy
generates its manifest for our plugin (`sonobuoy gen --plugin`); on this cluster, where pods reach the API server
only through the host's network, the aggregator is moved there (`sonobuoy/on_host.py` says why `sonobuoy run`
cannot do that here), the manifest is applied, and `sonobuoy wait`, `retrieve` and `results` read the run. The
plugin runs the whole default selection, as a nightly run would (75 passed and 135 not applicable here: the driver
runs only on the one tainted real node, and its socket checks go through the node agent's relay, which the suite's
image ships). The verdict `sonobuoy results` prints must be the one in our summary.json inside the tarball, and no
check may fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_conformance.backends.local import ports, real_node, shipped
from dra_conformance.backends.local.backend import LocalBackend
from dra_conformance.backends.registry import build_sonobuoy
from dra_conformance.config import SuiteConfig
from dra_conformance.kube.client import client_from_kubeconfig
from dra_conformance.report.certification import SUMMARY_JSON
from dra_conformance.sonobuoy import on_host, plugin, protocol
from dra_conformance.sonobuoy import results as results_format
from tests.reference_image import IMAGE_BUILD_DEADLINE, SHIPPED_PROFILE, build_image, shipped_driver_cluster

pytestmark = [
    pytest.mark.xdist_group("real-node"),
    pytest.mark.skipif(os.geteuid() != 0, reason="not applicable: the real node's kubelet and containerd need root"),
]

CLUSTER_NAME = "local-real-node"
# Sonobuoy's run: the aggregator and the plugin's pod start from imported images (seconds), the suite in the pod
# runs its checks (minutes on a busy 2-core machine); `sonobuoy wait` takes whole minutes.
SONOBUOY_WAIT_MINUTES = 20
# `sonobuoy gen`, `retrieve` and `results` answer in seconds; the wait gets a minute beyond its own.
SONOBUOY_COMMAND_DEADLINE = 120.0
OUTPUT_TAIL = 4000
# Where Sonobuoy's aggregator unpacks the tarball our plugin hands its worker (sonobuoy/protocol.py).
RESULTS_DIR = f"plugins/{plugin.PLUGIN_NAME}/results/global"


def _run(command: list[str], timeout: float = SONOBUOY_COMMAND_DEADLINE) -> str:
    """`command`'s stdout, asserting exit 0 (with its output when not)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"{' '.join(command)}: exit {done.returncode}\n" + (done.stdout + done.stderr)[-OUTPUT_TAIL:]
    )
    return done.stdout


def _profile_for_the_pod(directory: Path) -> Path:
    """The shipped profile as the plugin mounts it: its RBAC file beside it, without the install section.

    In the pod the driver is already installed; `install` names the archive and manifests on this machine.
    """
    raw = yaml.safe_load(SHIPPED_PROFILE.read_text())
    raw.pop("install")
    (rbac,) = raw["identity"]["rbac"]
    (directory / "rbac.yaml").write_text((SHIPPED_PROFILE.parent / rbac).read_text())
    raw["identity"]["rbac"] = ["rbac.yaml"]
    profile = directory / "reference-driver-shipped.yaml"
    profile.write_text(yaml.safe_dump(raw, sort_keys=False))
    return profile


def _our_summary(tarball: Path) -> dict[str, Any]:
    """summary.json of our run, from the results Sonobuoy's aggregator unpacked out of our plugin's tarball."""
    with tarfile.open(tarball) as retrieved:
        found = [name for name in retrieved.getnames() if name.endswith(f"{RESULTS_DIR}/{SUMMARY_JSON}")]
        assert len(found) == 1, f"one summary of our plugin expected in {tarball}: {found}; {_listing(retrieved)}"
        summary_file = retrieved.extractfile(found[0])
        assert summary_file is not None
        summary: dict[str, Any] = json.loads(summary_file.read())
    return summary


def _listing(tarball: tarfile.TarFile) -> list[str]:
    """The tarball's members but the Allure results (hundreds of files named by UUID)."""
    return [name for name in tarball.getnames() if "allure-results/" not in name]


@pytest.fixture
def real_node_cluster(tmp_path: Path) -> Iterator[LocalBackend]:
    """A local cluster with the real node running the reference driver as shipped; stopped after the test."""
    with shipped_driver_cluster(tmp_path / "cluster") as backend:
        yield backend


@pytest.mark.timeout(2 * IMAGE_BUILD_DEADLINE + 60 * SONOBUOY_WAIT_MINUTES + 10 * SONOBUOY_COMMAND_DEADLINE)
def test_sonobuoy_runs_the_suite_in_cluster_and_its_results_show_the_verdict_of_our_summary(
    real_node_cluster: LocalBackend, tmp_path: Path
) -> None:
    images = tmp_path / "images"
    for kind, output in (("suite", images / "suite.tar"), ("sonobuoy", images / "sonobuoy.tar")):
        failed = build_image(kind, output)
        assert failed is None, f"image build {kind}: {failed}"
    sonobuoy = build_sonobuoy(SuiteConfig())
    info = real_node_cluster.start()
    real_node_cluster.import_images((images / "suite.tar", images / "sonobuoy.tar"))
    kubeconfig = str(info.kubeconfig)

    with client_from_kubeconfig(info.kubeconfig) as api_client:
        shipped.apply(api_client, plugin.rbac_documents())
    pod_dir = tmp_path / "profile"
    pod_dir.mkdir()
    plugin_file = tmp_path / "plugin.yaml"
    plugin_file.write_text(
        _run(
            [
                sys.executable,
                "-m",
                "dra_conformance.cli",
                "sonobuoy-plugin",
                "--profile",
                str(_profile_for_the_pod(pod_dir)),
                "--cluster-name",
                CLUSTER_NAME,
                "--api-server-from-host",
                info.server,
                "--node",
                real_node.REAL_NODE,
            ]
        )
    )
    generated = _run(
        [
            str(sonobuoy),
            "gen",
            "--kubeconfig",
            kubeconfig,
            "--plugin",
            str(plugin_file),
            "--sonobuoy-image",
            f"dra-conformance.io/sonobuoy:{protocol.SONOBUOY_VERSION}",
            "--image-pull-policy",
            "Never",
            # Sonobuoy's default, clusterAdmin, makes its aggregator a reader of every namespace's claims.
            "--aggregator-permissions",
            "namespaceAdmin",
            "--kubernetes-version",
            "ignore",
        ]
    )
    with ports.reserved() as reservation:
        documents = [d for d in yaml.safe_load_all(generated) if d]
        manifest = on_host.aggregator_on_host(
            documents, info.server, (real_node.REAL_NODE,), reservation.take(), reservation.take()
        )
        with client_from_kubeconfig(info.kubeconfig) as api_client:
            shipped.apply(api_client, manifest)
        _run(
            [
                str(sonobuoy),
                "wait",
                "--kubeconfig",
                kubeconfig,
                f"--wait={SONOBUOY_WAIT_MINUTES}",
                "--wait-output=silent",
            ],
            timeout=60 * SONOBUOY_WAIT_MINUTES + SONOBUOY_COMMAND_DEADLINE,
        )
    retrieved = _run([str(sonobuoy), "retrieve", "--kubeconfig", kubeconfig, str(tmp_path)]).strip().splitlines()
    tarball = Path(retrieved[-1])
    results = _run([str(sonobuoy), "results", str(tarball)])
    print(results)

    summary = _our_summary(tarball)
    shown = re.search(r"^Status: (.+)$", results, re.MULTILINE)
    assert shown is not None, f"no Status line in `sonobuoy results`:\n{results}"
    # Sorted first among the statuses, so `sonobuoy status` shows it as the plugin's RESULT (sonobuoy/results.py).
    assert shown.group(1).startswith(results_format.verdict_status(summary["verdict"])), (
        f"`sonobuoy results` does not lead with our verdict {summary['verdict']!r}:\n{results}"
    )
    totals = summary["totals"]
    assert not totals.get("failed") and not totals.get("error"), f"in-cluster run: {summary['reasons']}"
    assert totals.get("passed"), f"no check passed in the pod: {totals}; {summary['reasons']}"
